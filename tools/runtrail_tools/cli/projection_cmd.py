"""``runtrail projection show|list|replay``: read the run projection the projector keeps.

Both read commands scope tenants the same way: ``--tenant``, else ``RUNTRAIL_TENANT`` when it is
set, else every tenant. ``show --run R`` prints one run's projection as JSON (with its halt, if
it halted); with no tenant given it finds the run in whichever tenant holds it, and fails naming
the tenants when more than one does (tenants never mix: pick one with ``--tenant``).
``list`` prints one line per run, filtered by ``--status``, ``--halted`` and the tenant scope.
``replay`` is ``runtrail replay projection`` under this group too.

The store defaults to the projector service's (``RUNTRAIL_PROJECTOR_STORE_URL``, else
``sqlite:///<state dir>/projection.db``); ``--store URL`` reads another one (a rebuild). Both
only read it: a store that is missing, of another kind, or of another runtrail version is one
line naming it, exit 2 (never a new, empty store: :mod:`runtrail_tools.cli.store_open`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from runtrail.persistence.kinds import PROJECTIONS
from runtrail.persistence.registry import open_store
from runtrail.persistence.urls import redact_url
from runtrail.projection import ProjectionStore
from runtrail.projection.display import row_json
from runtrail_tools.cli.common import add_common_flags, positive_int, settings_from_args
from runtrail_tools.cli.replay_projection_cmd import add_replay_parser
from runtrail_tools.cli.store_open import (
    MAX_CANDIDATES,
    AmbiguousRun,
    open_store_or_explain,
    store_errors_explained,
    tenant_holding,
    tenant_scope,
)

EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE = 0, 1, 2

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


def store_url(args: argparse.Namespace) -> str:
    """``--store``, else the projector service's configured store."""
    if args.store:
        return str(args.store)
    from runtrail_services.projector.settings import ProjectorSettings

    return ProjectorSettings.load().resolved_store_url(settings_from_args(args).state_dir)


@contextmanager
def _reading(args: argparse.Namespace) -> Iterator[ProjectionStore]:
    """The store, opened only to read (nothing created or changed); a store error while it is
    read is one line too (:class:`~runtrail_tools.cli.store_open.StoreUnreachable`)."""
    url = store_url(args)
    store = open_store_or_explain(
        "projection", url, lambda: open_store(PROJECTIONS, url), mode="read"
    )
    try:
        with store_errors_explained("projection", url):
            yield store
    finally:
        store.close()


def run_show(args: argparse.Namespace) -> int:
    tenant = tenant_scope(args)
    try:
        with _reading(args) as store:
            if tenant is not None:
                row = store.get(tenant, args.run)
                elsewhere = [] if row else [r.tenant_id for r in store.list(run_id=args.run)]
            else:
                rows = store.list(run_id=args.run, limit=MAX_CANDIDATES + 1)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    where = redact_url(store_url(args))
    if tenant is not None:
        if row is None:
            hint = f" (it is in tenant {', '.join(map(repr, elsewhere))})" if elsewhere else ""
            return _fail(
                EXIT_NOT_FOUND,
                f"no projection of run {args.run!r} in tenant {tenant!r}{hint} of the store "
                f"{where}",
            )
    else:
        try:
            found = tenant_holding(args.run, [r.tenant_id for r in rows])
        except AmbiguousRun as exc:
            return _fail(EXIT_USAGE, str(exc))
        if found is None:
            return _fail(
                EXIT_NOT_FOUND,
                f"no projection of run {args.run!r} in any tenant of the store {where}",
            )
        row = rows[0]
    print(json.dumps(row_json(row), indent=2))
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    try:
        with _reading(args) as store:
            rows = store.list(
                args.status,
                tenant_scope(args),
                halted=True if args.halted else None,
                limit=args.limit,
            )
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
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
