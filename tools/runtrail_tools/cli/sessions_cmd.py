"""``runtrail sessions list|show|delete|rebuild``: read and repair the session store.

``list`` prints one JSON line per stored session. ``show ID`` prints the latest snapshot, as
stored (digest included); ``--restore`` also replays the events after it from the events
topic (no model or tool is called) and prints the restored session; ``--resolve`` opens its
protected content with the configured content and key stores (``[erased]`` where it was
erased or pruned; marked ``"resolved": true``: the digest covers the stored references).
``rebuild ID`` builds the session from the whole topic, from offset zero, and replaces the
stored snapshot — the repair for a corrupted or untrusted one. The store defaults to the
sessions service's (``RUNTRAIL_SESSIONS_STORE_URL``, else ``file://<state dir>/sessions``);
the tenant to ``--tenant`` / ``RUNTRAIL_TENANT``.

Exit status: 0 done, 1 not found or refused (a corrupted snapshot: the message names the file
or row), 2 could not run as asked.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from runtrail_tools.cli.common import add_common_flags, settings_from_args

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


def register(subparsers: Any) -> None:
    sessions = subparsers.add_parser(
        "sessions",
        help="list, show, delete or rebuild stored session snapshots",
        description="Read and repair the session store.",
    )
    sub = sessions.add_subparsers(dest="sessions_command", metavar="COMMAND", required=True)

    listing = sub.add_parser("list", help="stored sessions, one JSON line each")
    listing.add_argument("--all-tenants", action="store_true", help="every tenant's sessions")
    _common(listing)
    listing.set_defaults(func=run_list)

    show = sub.add_parser("show", help="print a session's latest snapshot")
    show.add_argument("session_id", metavar="ID")
    show.add_argument(
        "--restore",
        action="store_true",
        help="replay the events after the snapshot from the events topic and print the "
        "restored session (nothing is called, nothing is saved)",
    )
    show.add_argument(
        "--resolve",
        action="store_true",
        help="open the protected content (RUNTRAIL_CONTENT_STORE_URL, RUNTRAIL_KEY_STORE_URL); "
        "erased content reads [erased]",
    )
    _common(show)
    show.set_defaults(func=run_show)

    delete = sub.add_parser("delete", help="delete a session's snapshot")
    delete.add_argument("session_id", metavar="ID")
    _common(delete)
    delete.set_defaults(func=run_delete)

    rebuild = sub.add_parser(
        "rebuild", help="rebuild a session from the whole events topic and store it"
    )
    rebuild.add_argument("session_id", metavar="ID")
    _common(rebuild)
    rebuild.set_defaults(func=run_rebuild)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        help="file:///dir or postgresql://… (default: RUNTRAIL_SESSIONS_STORE_URL, else "
        "file://<state dir>/sessions)",
    )
    add_common_flags(parser)


def _fail(status: int, message: str) -> int:
    print(f"runtrail: {message}", file=sys.stderr)
    return status


def _open(args: argparse.Namespace) -> Any:
    from runtrail.persistence import open_store
    from runtrail.persistence.kinds import SESSION_SNAPSHOTS
    from runtrail_services.sessions.settings import SessionsSettings

    settings = settings_from_args(args)
    url = args.store or SessionsSettings().resolved_store_url(settings.state_dir)
    return open_store(SESSION_SNAPSHOTS, url)


def run_list(args: argparse.Namespace) -> int:
    from runtrail.sessions import SessionStoreError

    tenant = None if args.all_tenants else settings_from_args(args).tenant
    try:
        with _open(args) as store:
            for summary in store.list(tenant):
                sys.stdout.write(orjson.dumps(summary.as_json()).decode() + "\n")
    except (SessionStoreError, ValueError) as exc:
        return _fail(EXIT_USAGE, str(exc))
    return EXIT_OK


def run_show(args: argparse.Namespace) -> int:
    from runtrail.sessions import SessionStoreError, UntrustedSnapshot

    settings = settings_from_args(args)
    try:
        with _open(args) as store:
            if args.restore:
                from runtrail.sessions.restore import restore_session

                restored = restore_session(store, settings.tenant, args.session_id, settings)
                if restored.snapshot is None and restored.session.revision == 0:
                    return _fail(EXIT_REFUSED, f"no session {settings.tenant}/{args.session_id}")
                print(
                    f"runtrail: restored {settings.tenant}/{args.session_id}: "
                    f"{restored.snapshot.revision if restored.snapshot else 0} event(s) from the "
                    f"snapshot, {restored.replayed} replayed from {settings.events_topic}",
                    file=sys.stderr,
                )
                snapshot = restored.session.snapshot()
            else:
                found = store.load(settings.tenant, args.session_id)
                if found is None:
                    return _fail(EXIT_REFUSED, f"no session {settings.tenant}/{args.session_id}")
                snapshot = found
    except (SessionStoreError, UntrustedSnapshot) as exc:
        return _fail(EXIT_REFUSED, str(exc))
    except ValueError as exc:
        return _fail(EXIT_USAGE, str(exc))
    if args.resolve:
        from runtrail.privacy.resolve import resolved_snapshot, resolver_from_settings

        resolver = resolver_from_settings(settings)
        try:
            sys.stdout.write(orjson.dumps(resolved_snapshot(resolver, snapshot)).decode() + "\n")
        finally:
            resolver.close()
        return EXIT_OK
    sys.stdout.write(snapshot.to_bytes().decode() + "\n")
    return EXIT_OK


def run_delete(args: argparse.Namespace) -> int:
    from runtrail.sessions import SessionStoreError

    tenant = settings_from_args(args).tenant
    try:
        with _open(args) as store:
            if not store.delete(tenant, args.session_id):
                return _fail(EXIT_REFUSED, f"no session {tenant}/{args.session_id}")
    except (SessionStoreError, ValueError) as exc:
        return _fail(EXIT_USAGE, str(exc))
    return EXIT_OK


def run_rebuild(args: argparse.Namespace) -> int:
    from runtrail.sessions import SessionStoreError
    from runtrail.sessions.restore import build_from_topic

    settings = settings_from_args(args)
    try:
        session = build_from_topic(settings.tenant, args.session_id, settings)
        if session.revision == 0:
            return _fail(EXIT_REFUSED, f"no event of {settings.tenant}/{args.session_id} found")
        snapshot = session.snapshot()
        with _open(args) as store:
            if not store.save(snapshot):  # the stored one claims more events: it is wrong
                store.delete(settings.tenant, args.session_id)
                store.save(snapshot)
    except (SessionStoreError, ValueError) as exc:
        return _fail(EXIT_USAGE, str(exc))
    print(
        f"runtrail: rebuilt {settings.tenant}/{args.session_id}: {snapshot.revision} event(s), "
        f"{snapshot.digest}",
        file=sys.stderr,
    )
    return EXIT_OK
