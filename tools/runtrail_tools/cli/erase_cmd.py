"""``runtrail erase``: erase a run's or a data subject's protected content (crypto-shredding).

``runtrail erase --tenant T --run R --reason "…"`` destroys the run's data key, deletes its
sealed objects from the content store, deletes the derived plaintext copies named with
``--session`` (session snapshots) and ``--thread`` (LangGraph checkpoints), writes tombstones
over the run's records on the compacted resume-cache and sessions topics (unless
``--no-topics``: no broker to reach), deletes the large snapshots' blobs of the sessions named
or tombstoned (``--session-blobs``, default the sessions service's), then appends a
``run.content_erased`` event to the run (signed with the audit key when one exists). With
``--subject S`` the subject is a configured data subject (an end user); ``--record-run`` names
the run whose history records the erasure (none: no event). Prints the report as one JSON line.
What erasure guarantees and what it cannot: ``docs/PRIVACY.md``.

Exit status: 0 erased, 1 nothing to erase (no key for the subject), 2 could not run as asked.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

import orjson

from runtrail_tools.cli.common import add_common_flags, settings_from_args

EXIT_OK, EXIT_NOTHING, EXIT_USAGE = 0, 1, 2


def register(subparsers: Any) -> None:
    erase = subparsers.add_parser(
        "erase",
        help="erase a run's or a data subject's protected content",
        description="Destroy the data key of a run (or data subject), delete its protected "
        "content and derived copies, and record the erasure in the run's history.",
    )
    target = erase.add_mutually_exclusive_group(required=True)
    target.add_argument("--run", help="erase this run's content (its data subject is the run)")
    target.add_argument("--subject", help="erase a configured data subject's content")
    erase.add_argument("--reason", required=True, help="why (recorded in the history)")
    erase.add_argument("--requested-by", help="who asked (default: the OS user)")
    erase.add_argument("--record-run", help="with --subject: the run whose history records it")
    erase.add_argument(
        "--session", action="append", default=[], help="also delete this session's snapshots"
    )
    erase.add_argument(
        "--thread", action="append", default=[], help="also delete this thread's checkpoints"
    )
    erase.add_argument(
        "--sessions-store", metavar="URL", help="the session store (default: the service's)"
    )
    erase.add_argument(
        "--session-blobs", metavar="URL", help="the large snapshots' store (default: the service's)"
    )
    erase.add_argument("--checkpoints-store", metavar="URL", help="the LangGraph checkpoint store")
    erase.add_argument("--no-event", action="store_true", help="record nothing in the history")
    erase.add_argument(
        "--no-topics",
        action="store_true",
        help="leave the compacted resume-cache and sessions topics alone (no broker)",
    )
    add_common_flags(erase)
    erase.set_defaults(func=run_erase)


def run_erase(args: argparse.Namespace) -> int:
    from runtrail.privacy.erasure import ErasureRequest, erase, publish_erasure
    from runtrail.privacy.protect import vault_from_settings

    settings = settings_from_args(args)
    if not args.tenant:
        return _fail(EXIT_USAGE, "--tenant is required")
    if args.thread and not args.checkpoints_store:
        return _fail(EXIT_USAGE, "--thread needs --checkpoints-store URL")
    vault = vault_from_settings(settings)
    if vault is None:
        return _fail(EXIT_USAGE, "no content store configured (RUNTRAIL_CONTENT_STORE_URL)")
    request = ErasureRequest(
        tenant=args.tenant,
        subject=args.run or args.subject,
        reason=args.reason,
        requested_by=args.requested_by or getpass.getuser(),
        run_id=args.run or args.record_run,
        scope="run" if args.run else "subject",
    )
    try:
        report = erase(vault, request, _copies(args, settings))
    finally:
        vault.close()
    if report.key_id is None and not any(report.copies_deleted.values()):
        return _fail(EXIT_NOTHING, f"nothing to erase for that {request.scope} of {args.tenant}")
    if not args.no_event:
        publish_erasure(settings, request, report, _signer(settings))
    sys.stdout.write(orjson.dumps(report.as_json()).decode() + "\n")
    return EXIT_OK


def _copies(args: argparse.Namespace, settings: Any) -> dict[str, Any]:
    """The derived plaintext copies to delete, each a function counting what it deleted."""
    from runtrail.persistence import open_store
    from runtrail.persistence.kinds import LANGGRAPH_CHECKPOINTS, SESSION_SNAPSHOTS

    copies: dict[str, Any] = {}
    if args.session:
        from runtrail_services.sessions.settings import SessionsSettings

        url = args.sessions_store or SessionsSettings().resolved_store_url(settings.state_dir)

        def sessions(_key_id: str | None) -> int:
            store = open_store(SESSION_SNAPSHOTS, url)
            try:
                return sum(store.delete(args.tenant, s) for s in args.session)
            finally:
                store.close()

        copies["sessions"] = sessions
    if args.thread:

        def checkpoints(_key_id: str | None) -> int:
            backend = open_store(LANGGRAPH_CHECKPOINTS, args.checkpoints_store)
            try:
                for thread in args.thread:
                    backend.delete_thread(args.tenant, thread)
                return len(args.thread)
            finally:
                backend.close()

        copies["checkpoints"] = checkpoints
    #: the sessions named, then those whose pointers the sessions topic step tombstones
    erased_sessions = set(args.session)
    if not args.no_topics:
        copies.update(_topic_copies(args, settings, erased_sessions))
    if erased_sessions or not args.no_topics:
        copies["sessionBlobs"] = lambda _key_id: _delete_blobs(args, settings, erased_sessions)
    return copies


def _topic_copies(
    args: argparse.Namespace, settings: Any, erased_sessions: set[str]
) -> dict[str, Any]:
    """Tombstones over the scope's records on the compacted topics that copy run data; the
    sessions whose pointers were tombstoned join ``erased_sessions``."""
    from runtrail.privacy.topic_tombstones import (
        ErasedScope,
        tombstone_cache,
        tombstone_sessions,
    )

    runs = [args.run] if args.run else []

    def scope(key_id: str | None) -> ErasedScope:
        return ErasedScope(args.tenant, runs=runs, sessions=args.session, key_id=key_id)

    def sessions_topic(key_id: str | None) -> int:
        found = tombstone_sessions(settings, scope(key_id))
        erased_sessions.update(found)
        return len(found)

    return {
        "cacheTopic": lambda key_id: tombstone_cache(settings, scope(key_id)),
        "sessionsTopic": sessions_topic,
    }


def _delete_blobs(args: argparse.Namespace, settings: Any, sessions: set[str]) -> int:
    """Delete every large snapshot's blob of these sessions (their pointers are gone)."""
    if not sessions:
        return 0
    from runtrail.sessions.blobs import SnapshotBlobStore
    from runtrail_services.sessions.settings import SessionsSettings

    url = args.session_blobs or SessionsSettings().resolved_blob_url(settings.state_dir)
    blobs = SnapshotBlobStore(url)
    return sum(blobs.delete_session(args.tenant, s) for s in sorted(sessions))


def _signer(settings: Any) -> Any:
    """The audit service's signing key, when one was made (``runtrail audit keygen``)."""
    from runtrail.audit.keys import load_signer
    from runtrail_services.audit.settings import AuditSettings

    audit = AuditSettings.load()
    path = audit.resolved_key_path(settings.state_dir)
    return load_signer(path, audit.key_name) if path.exists() else None


def _fail(status: int, message: str) -> int:
    print(f"runtrail erase: {message}", file=sys.stderr)
    return status
