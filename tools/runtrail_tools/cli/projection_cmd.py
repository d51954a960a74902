"""``runtrail projection show|list|replay``: read the run projection the projector keeps.

Both read commands scope tenants the same way: ``--tenant``, else ``RUNTRAIL_TENANT`` when it is
set, else every tenant. ``show --run R`` prints one run's projection as JSON (with its halt, if
it halted); with no tenant given it finds the run in whichever tenant holds it, and fails naming
the tenants when more than one does (tenants never mix: pick one with ``--tenant``).
``list`` prints one line per run, filtered by ``--status``, ``--halted`` and the tenant scope.
``replay`` is ``runtrail replay projection`` under this group too.

The store defaults to the projector service's (``RUNTRAIL_PROJECTOR_STORE_URL``, else
``sqlite:///<state dir>/projection.db``); ``--store URL`` reads another one (a rebuild).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from runtrail.persistence.kinds import PROJECTIONS
from runtrail.persistence.registry import open_store
from runtrail.projection import ProjectionStore
from runtrail.projection.display import row_json
from runtrail_tools.cli.common import add_common_flags, positive_int, settings_from_args
from runtrail_tools.cli.replay_projection_cmd import add_replay_parser
from runtrail_tools.cli.store_open import open_store_or_explain

EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE = 0, 1, 2
#: Tenants named when a run ID is in several (show without --tenant).
MAX_CANDIDATES = 10

STATUSES = (
    "received",
    "planning",
    "awaiting_input",
    "awaiting_approval",
    "executing",
    "reconciling",
    "succeeded",
    "failed",
    "cancelled",
)


def register(subparsers: Any) -> None:
    group = subparsers.add_parser(
        "projection",
        help="read (or rebuild) the run projection",
        description="Read the run projection kept by the projector service, or rebuild it.",
    )
    sub = group.add_subparsers(dest="projection_command", metavar="COMMAND", required=True)

    show = sub.add_parser(
        "show",
        help="print one run's projection as JSON",
        description="Print one run's projection as JSON. Exits 1 when the store has no such run, "
        "2 when no tenant is given and the run ID is in several tenants.",
    )
    selector = show.add_argument_group("run", "which run: --run, in --tenant (else any tenant)")
    selector.add_argument("--run", required=True, help="run ID")
    _tenant_flag(selector)
    _store_flag(show)
    show.set_defaults(func=run_show)

    listing = sub.add_parser(
        "list",
        help="list runs and their status",
        description="One line per run: tenant, run, status, version, and the halt reason if "
        "its projection halted. --tenant filters to one tenant (default: RUNTRAIL_TENANT if "
        "set, else every tenant).",
    )
    _tenant_flag(listing.add_argument_group("runs", "which runs"))
    listing.add_argument("--status", choices=STATUSES, help="only runs in this status")
    listing.add_argument("--halted", action="store_true", help="only halted runs")
    listing.add_argument("--limit", type=positive_int, help="at most this many runs")
    listing.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    _store_flag(listing)
    listing.set_defaults(func=run_list)

    add_replay_parser(sub, "replay")


def _store_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        help="projection store (default: RUNTRAIL_PROJECTOR_STORE_URL, else "
        "sqlite:///<state dir>/projection.db)",
    )
    add_common_flags(parser, tenant=False)


def _tenant_flag(group: Any) -> None:
    group.add_argument(
        "--tenant",
        help="tenant ID (default: RUNTRAIL_TENANT if set, else every tenant)",
    )


def tenant_scope(args: argparse.Namespace) -> str | None:
    """The one tenant to read (``--tenant``, else ``RUNTRAIL_TENANT`` if set), or None: all."""
    return args.tenant or os.environ.get("RUNTRAIL_TENANT") or None


def store_url(args: argparse.Namespace) -> str:
    """``--store``, else the projector service's configured store."""
    if args.store:
        return str(args.store)
    from runtrail_services.projector.settings import ProjectorSettings

    return ProjectorSettings.load().resolved_store_url(settings_from_args(args).state_dir)


def _open(args: argparse.Namespace) -> ProjectionStore:
    url = store_url(args)
    return open_store_or_explain("projection", url, lambda: open_store(PROJECTIONS, url))


def run_show(args: argparse.Namespace) -> int:
    tenant = tenant_scope(args)
    try:
        store = _open(args)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    try:
        if tenant is not None:
            row = store.get(tenant, args.run)
            elsewhere = [] if row else [r.tenant_id for r in store.list(run_id=args.run)]
        else:
            rows = store.list(run_id=args.run, limit=MAX_CANDIDATES + 1)
    finally:
        store.close()
    if tenant is not None:
        if row is None:
            hint = f" (it is in tenant {', '.join(map(repr, elsewhere))})" if elsewhere else ""
            return _fail(
                EXIT_NOT_FOUND, f"no projection of run {args.run!r} in tenant {tenant!r}{hint}"
            )
    elif not rows:
        return _fail(EXIT_NOT_FOUND, f"no projection of run {args.run!r} in any tenant")
    elif len(rows) > 1:
        names = ", ".join(repr(r.tenant_id) for r in rows[:MAX_CANDIDATES])
        more = " and more" if len(rows) > MAX_CANDIDATES else ""
        return _fail(
            EXIT_USAGE,
            f"run {args.run!r} is in several tenants ({names}{more}): choose one with --tenant",
        )
    else:
        row = rows[0]
    print(json.dumps(row_json(row), indent=2))
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    try:
        store = _open(args)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    try:
        rows = store.list(
            args.status,
            tenant_scope(args),
            halted=True if args.halted else None,
            limit=args.limit,
        )
    finally:
        store.close()
    for row in rows:
        if args.json:
            summary = row_json(row)
            del summary["projection"]
            print(json.dumps(summary))
        else:
            halt = f"  HALTED: {row.halt_reason}" if row.halted else ""
            print(f"{row.tenant_id}\t{row.run_id}\t{row.status or '-'}\t{row.version}{halt}")
    return EXIT_OK


def _fail(status: int, message: str) -> int:
    print(f"runtrail: {message}", file=sys.stderr)
    return status
