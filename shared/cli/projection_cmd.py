"""``runtrail projection show|list|replay``: read the run projection the projector keeps.

``show --run R`` prints one run's projection as JSON (with its halt, if it halted); the run is
looked up in one tenant (``--tenant``, else ``RUNTRAIL_TENANT``), since tenants never mix.
``list`` prints one line per run, filtered by ``--status``, ``--halted`` and ``--tenant``.
``replay`` is ``runtrail replay projection`` under this group too.

The store defaults to the projector service's (``RUNTRAIL_PROJECTOR_STORE_URL``, else
``sqlite:///<state dir>/projection.db``); ``--store URL`` reads another one (a rebuild).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from runtrail.cli.common import add_common_flags, settings_from_args
from runtrail.cli.replay_projection_cmd import add_replay_parser
from runtrail.projection import ProjectionStore, StoredProjection, open_projection_store

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
        description="Print one run's projection as JSON. Exits 1 when the store has no such run.",
    )
    show.add_argument("--run", required=True, help="run ID")
    _store_flag(show)
    show.set_defaults(func=run_show)

    listing = sub.add_parser(
        "list",
        help="list runs and their status",
        description="One line per run: tenant, run, status, version, and the halt reason if "
        "its projection halted. --tenant filters to one tenant (default: every tenant).",
    )
    listing.add_argument("--status", choices=STATUSES, help="only runs in this status")
    listing.add_argument("--halted", action="store_true", help="only halted runs")
    listing.add_argument("--limit", type=int, help="at most this many runs")
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
    add_common_flags(parser)


def store_url(args: argparse.Namespace) -> str:
    """``--store``, else the projector service's configured store."""
    if args.store:
        return str(args.store)
    from runtrail_services.projector.settings import ProjectorSettings

    return ProjectorSettings.load().resolved_store_url(settings_from_args(args).state_dir)


def _open(args: argparse.Namespace) -> ProjectionStore:
    return open_projection_store(store_url(args))


def row_json(row: StoredProjection) -> dict[str, Any]:
    """A stored row as JSON: identity, status, halt and the projection itself."""
    c = row.halt_coordinates
    return {
        "tenantId": row.tenant_id,
        "runId": row.run_id,
        "status": row.status,
        "version": str(row.version),
        "projectorVersion": row.projector_version,
        "halted": row.halted,
        "haltReason": row.halt_reason,
        "haltedAt": None
        if c is None
        else {
            "topic": c.topic,
            "partition": c.partition,
            "offset": c.offset,
            "sequence": str(c.sequence),
            "eventId": c.event_id,
            "type": c.event_type,
            "schemaVersion": c.schema_version,
        },
        "projection": row.state.json_form() if row.state is not None else None,
    }


def run_show(args: argparse.Namespace) -> int:
    tenant = settings_from_args(args).tenant
    try:
        store = _open(args)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    try:
        row = store.get(tenant, args.run)
    finally:
        store.close()
    if row is None:
        return _fail(EXIT_NOT_FOUND, f"no projection of run {args.run!r} in tenant {tenant!r}")
    print(json.dumps(row_json(row), indent=2))
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    try:
        store = _open(args)
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    try:
        rows = store.list(
            args.status, args.tenant, halted=True if args.halted else None, limit=args.limit
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
