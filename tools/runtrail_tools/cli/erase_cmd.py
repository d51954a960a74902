"""``runtrail erase``: erase a run's or a data subject's protected content (crypto-shredding).

``runtrail erase --tenant T --run R --reason "…"`` destroys the run's data key, deletes its
sealed objects from the content store, writes tombstones over the run's records on the
compacted resume-cache and sessions topics (unless ``--no-topics``: no broker to reach),
deletes the run's entries, open intents and open model nodes (and those holding the destroyed
key's references) from the resume-cache store (``--cache-store``, default the service's;
:mod:`runtrail.privacy.erased_cache`), deletes the snapshots and large snapshots' blobs of
every session that holds the run or the
destroyed key's references — found in the session store and on the sessions topic
(:mod:`runtrail.privacy.erased_sessions`), plus any named with ``--session`` — and the
LangGraph checkpoint threads that hold them — found in the checkpoint store
(:mod:`runtrail.privacy.erased_threads`), plus any named with ``--thread`` — then appends a ``run.content_erased``
event to the run (signed with the audit key when one exists). With
``--subject S`` the subject is a configured data subject (an end user); ``--record-run`` names
the run whose history records the erasure (none: no event). Prints the report as one JSON line.
What erasure guarantees and what it cannot: ``docs/PRIVACY.md``.

The stores that can tell which sessions and threads hold the erasure are searched before the
key is destroyed, and what they found is kept in an erasure journal beside the key store
(:mod:`runtrail.privacy.erasure_journal`) until the erasure is recorded: an erasure that
stopped half-way (exit status 3: a store or the broker unreachable) is finished by running the
same command again. Its event then counts what every attempt deleted.

Erasing a subject erased already (no data key since) does nothing: it prints the earlier
erasure's record (``"alreadyErased": true``, ``erasedAt``, its key and event), says when it
was erased and exits 1 (nothing to erase), with no second event and nothing deleted.

Exit status: 0 erased, 1 nothing to erase (no key for the subject, or erased already), 2
could not run as asked, 3 stopped before it finished (run it again).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

import orjson

from runtrail.persistence.urls import redact_url
from runtrail_tools.cli.common import add_common_flags, settings_from_args
from runtrail_tools.cli.store_open import missing_store

EXIT_OK, EXIT_NOTHING, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3


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
        "--session",
        action="append",
        default=[],
        help="also delete this session's snapshots (those holding the run are found)",
    )
    erase.add_argument(
        "--thread",
        action="append",
        default=[],
        help="also delete this thread's checkpoints (those holding the run are found)",
    )
    erase.add_argument(
        "--sessions-store", metavar="URL", help="the session store (default: the service's)"
    )
    erase.add_argument(
        "--session-blobs", metavar="URL", help="the large snapshots' store (default: the service's)"
    )
    erase.add_argument(
        "--cache-store",
        metavar="URL",
        help="the resume-cache store (default: the resume-cache service's)",
    )
    erase.add_argument(
        "--checkpoints-store",
        metavar="URL",
        help="the LangGraph checkpoint store (default: the sessions service's)",
    )
    erase.add_argument("--no-event", action="store_true", help="record nothing in the history")
    erase.add_argument(
        "--no-topics",
        action="store_true",
        help="leave the compacted resume-cache and sessions topics alone (no broker)",
    )
    add_common_flags(erase)
    erase.set_defaults(func=run_erase)


def run_erase(args: argparse.Namespace) -> int:
    from runtrail.privacy.erasure import (
        ErasureIncomplete,
        ErasureRequest,
        erase,
        publish_erasure,
    )
    from runtrail.privacy.erasure_journal import journal_from_settings
    from runtrail.privacy.protect import vault_from_settings

    settings = settings_from_args(args)
    if not args.tenant:
        return _fail(EXIT_USAGE, "--tenant is required")
    if args.run and args.record_run:
        return _fail(
            EXIT_USAGE,
            "--record-run goes with --subject: a run's erasure is recorded in its own history",
        )
    named = (
        ("--sessions-store", args.sessions_store),
        ("--session-blobs", args.session_blobs),
        ("--cache-store", args.cache_store),
        ("--checkpoints-store", args.checkpoints_store),
    )
    for flag, url in named:  # before anything is destroyed: a typo must not read as "0 deleted"
        missing = None if url is None else missing_store(url)
        if missing is not None:
            return _fail(EXIT_USAGE, f"the {flag} store {redact_url(url)} {missing}; nothing done")
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
    journal = journal_from_settings(settings)
    copies, searches = _steps(args, settings)
    try:
        try:
            report = erase(vault, request, copies, searches, journal)
        finally:
            vault.close()
        if report.already_erased is not None:
            sys.stdout.write(orjson.dumps(report.as_json()).decode() + "\n")
            return _fail(
                EXIT_NOTHING,
                f"nothing to erase for {f'run {args.run}' if args.run else 'that subject'} "
                f"of {args.tenant}: "
                f"erased already, at {report.already_erased.at} (event "
                f"{report.already_erased.event_id or 'none'}); nothing done, nothing recorded",
            )
        if report.key_id is None and not any(report.copies_deleted.values()):
            journal.finish(request.tenant, request.subject)
            return _fail(
                EXIT_NOTHING,
                f"nothing to erase for {f'run {args.run}' if args.run else 'that subject'} "
                f"of {args.tenant}",
            )
        if not args.no_event:
            try:
                publish_erasure(settings, request, report, _signer(settings))
            except Exception as exc:
                raise ErasureIncomplete("event", exc) from exc
    except ErasureIncomplete as stopped:
        return _fail(
            EXIT_INCOMPLETE,
            f"stopped before it finished, at {stopped}. What it found is recorded in "
            f"{journal.path(request.tenant, request.subject)}: once the store or broker is "
            "reachable, run the same command again to finish the erasure",
        )
    journal.finish(request.tenant, request.subject, report.finished())
    sys.stdout.write(orjson.dumps(report.as_json()).decode() + "\n")
    return EXIT_OK


def _steps(args: argparse.Namespace, settings: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The derived plaintext copies to delete, each a function counting what it deleted, in
    the order they run: the cache topic's records, then the resume-cache store's (its entries
    answer lookups), then the sessions' (the sessions topic first: the sessions step finds its
    sessions there too), snapshots and blobs, then the checkpoint threads (found in
    the checkpoint store: ``--checkpoints-store``, else the sessions service's, else the
    session store, as the service's retention finds it); and the stores searched before the
    key is destroyed (the session store, the checkpoint store)."""
    from runtrail.privacy.erased_cache import cache_store_exists, erase_cache_store
    from runtrail.privacy.erased_sessions import ErasedSessions
    from runtrail.privacy.erased_threads import ErasedThreads
    from runtrail_services.resume_cache.settings import ResumeCacheSettings
    from runtrail_services.sessions.settings import SessionsSettings

    runs = [args.run] if args.run else []
    defaults = SessionsSettings()
    sessions_store = args.sessions_store or defaults.resolved_store_url(settings.state_dir)
    sessions = ErasedSessions(
        args.tenant,
        runs,
        store_url=sessions_store,
        blobs_url=args.session_blobs or defaults.resolved_blob_url(settings.state_dir),
        found=set(args.session),
    )
    threads = ErasedThreads(
        args.tenant,
        runs,
        store_url=args.checkpoints_store or defaults.checkpoints_url or sessions_store,
        found=set(args.thread),
    )
    copies: dict[str, Any] = {}
    if not args.no_topics:
        from runtrail.privacy.topic_tombstones import ErasedScope, tombstone_cache

        copies["cacheTopic"] = lambda key_id: tombstone_cache(
            settings, ErasedScope(args.tenant, runs=runs, key_id=key_id)
        )
    cache_store = args.cache_store or ResumeCacheSettings().resolved_store_url(settings.state_dir)
    if args.cache_store or cache_store_exists(cache_store):  # the default: if there is one
        copies["cacheStore"] = lambda key_id: erase_cache_store(
            cache_store, args.tenant, runs, key_id
        )
    copies.update(sessions.erasers(None if args.no_topics else settings))
    copies["checkpoints"] = threads.delete
    return copies, {"sessions": sessions, "threads": threads}


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
