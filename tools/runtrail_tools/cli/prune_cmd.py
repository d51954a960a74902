"""``runtrail prune``: apply retention to the stores named (age, or the latest N checkpoints).

``--older-than DAYS`` prunes, in each store given, what is older: ``--content`` (the configured
content store: sealed objects; their references then read as erased), ``--sessions-store URL``
(session snapshots not updated since), ``--session-blobs URL`` (large snapshots' blobs
uploaded before), ``--cache-store URL`` (resume-cache entries written
before), ``--capture-sink URL`` (whole days of capture records, ``file://`` or an object
store). Session pointers and cache entries are tombstoned on their compacted topics first,
unless ``--no-topics`` (no broker). ``--keep-checkpoints N --checkpoints-store URL --tenant T``
keeps the latest N checkpoints of every LangGraph thread of the tenant. The services apply the
same functions on their own (``RUNTRAIL_RETENTION_POLICY``). Prints what it deleted as one JSON
line. See ``docs/PRIVACY.md`` ("Retention").
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import orjson

from runtrail.persistence.urls import redact_url
from runtrail_tools.cli.common import add_common_flags, settings_from_args
from runtrail_tools.cli.store_open import missing_store

EXIT_OK, EXIT_USAGE = 0, 2
DAY_S = 86_400
#: what the output calls each aged store, and the name the prune log (and the policy) give it
PRUNE_LOG_NAMES = {
    "content": "content",
    "sessions": "sessions",
    "sessionBlobs": "sessions",
    "cacheEntries": "resumeCache",
    "capture": "capture",
}


def register(subparsers: Any) -> None:
    prune = subparsers.add_parser(
        "prune",
        help="apply retention: delete what is older, or beyond the latest N checkpoints",
        description="Delete, in each store named, what the retention policy no longer keeps.",
    )
    prune.add_argument("--older-than", type=float, metavar="DAYS", help="age limit, in days")
    prune.add_argument("--content", action="store_true", help="prune the content store")
    prune.add_argument("--sessions-store", metavar="URL", help="prune this session store")
    prune.add_argument(
        "--session-blobs", metavar="URL", help="prune this store of large session snapshots"
    )
    prune.add_argument("--cache-store", metavar="URL", help="prune this resume-cache store")
    prune.add_argument("--capture-sink", metavar="URL", help="prune this capture sink")
    prune.add_argument("--checkpoints-store", metavar="URL", help="LangGraph checkpoint store")
    prune.add_argument("--keep-checkpoints", type=int, metavar="N", help="latest N per thread")
    prune.add_argument(
        "--no-topics",
        action="store_true",
        help="leave the compacted sessions and resume-cache topics alone (no broker)",
    )
    add_common_flags(prune)
    prune.set_defaults(func=run_prune)


def run_prune(args: argparse.Namespace) -> int:
    from runtrail.persistence import open_store
    from runtrail.persistence.kinds import CAPTURE_RECORDS, RESUME_ENTRIES, SESSION_SNAPSHOTS
    from runtrail.privacy import retention
    from runtrail.privacy.protect import vault_from_settings
    from runtrail.privacy.prune_log import record_prune

    aged = (
        args.content
        or args.sessions_store
        or args.session_blobs
        or args.cache_store
        or args.capture_sink
    )
    if aged and args.older_than is None:
        return _fail(
            "--content, --sessions-store, --session-blobs, --cache-store and --capture-sink "
            "need --older-than DAYS"
        )
    if (args.keep_checkpoints is None) != (args.checkpoints_store is None):
        return _fail("--keep-checkpoints and --checkpoints-store go together")
    if not aged and args.keep_checkpoints is None:
        return _fail("name a store to prune")
    named = (
        ("--sessions-store", args.sessions_store),
        ("--session-blobs", args.session_blobs),
        ("--cache-store", args.cache_store),
        ("--capture-sink", args.capture_sink),
        ("--checkpoints-store", args.checkpoints_store),
    )
    for flag, url in named:  # a typo must not be made into an empty store and pruned as one
        missing = None if url is None else missing_store(url)
        if missing is not None:
            return _fail(f"the {flag} store {redact_url(url)} {missing}; nothing pruned")
    settings = settings_from_args(args)
    cutoff = time.time() - (args.older_than or 0) * DAY_S
    done: dict[str, int] = {}
    if args.content:
        vault = vault_from_settings(settings)
        if vault is None:
            return _fail("no content store configured (RUNTRAIL_CONTENT_STORE_URL)")
        try:
            done["content"] = retention.prune_content(vault.content, cutoff)
        finally:
            vault.close()
    if args.sessions_store:
        store = open_store(SESSION_SNAPSHOTS, args.sessions_store)
        forget = None if args.no_topics else _forget_sessions(settings)
        try:
            done["sessions"] = retention.prune_sessions(store, cutoff, args.tenant, forget)
        finally:
            store.close()
    if args.session_blobs:
        from runtrail.sessions.blobs import SnapshotBlobStore

        blobs = SnapshotBlobStore(args.session_blobs)
        done["sessionBlobs"] = retention.prune_session_blobs(blobs, cutoff, args.tenant)
    if args.cache_store:
        cache = open_store(RESUME_ENTRIES, args.cache_store)
        try:
            done["cacheEntries"] = retention.prune_cache_entries(
                cache, cutoff, None if args.no_topics else _forget_entries(settings)
            )
        finally:
            cache.close()
    if args.capture_sink:
        # a file sink opened to prune must not repair the files a running service appends to
        local = urlsplit(args.capture_sink).scheme == "file"
        sink = open_store(
            CAPTURE_RECORDS, args.capture_sink, **({"repair": False} if local else {})
        )
        try:
            done["capture"] = retention.prune_capture(sink, cutoff)
        finally:
            sink.close()
    if args.keep_checkpoints is not None:
        from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver

        with RuntrailCheckpointSaver.from_url(
            args.checkpoints_store, tenant_id=settings.tenant
        ) as saver:
            done["checkpointThreads"] = retention.prune_checkpoints(saver, args.keep_checkpoints)
    for name, logged_as in PRUNE_LOG_NAMES.items():
        if name in done:
            scoped = args.tenant if logged_as == "sessions" else None  # the others span tenants
            record_prune(settings, logged_as, cutoff, done[name], scoped)
    sys.stdout.write(orjson.dumps(done).decode() + "\n")
    return EXIT_OK


def _forget_sessions(settings: Any) -> Any:
    """Tombstones of the pruned sessions' pointers on the sessions topic."""
    from runtrail.privacy.topic_tombstones import write_tombstones
    from runtrail.sessions.naming import session_key

    def forget(sessions: Sequence[tuple[str, str]]) -> None:
        doomed = {session_key(t, s).encode(): None for t, s in sessions}
        write_tombstones(settings, settings.sessions_topic, doomed)

    return forget


def _forget_entries(settings: Any) -> Any:
    """Tombstones of the pruned entries on the resume-cache topic."""
    from runtrail.privacy.topic_tombstones import write_tombstones
    from runtrail.resume.records import entry_tombstone

    def forget(keys: Sequence[tuple[str, str, str, str]]) -> None:
        doomed = {entry_tombstone(*key)[0]: None for key in keys}
        write_tombstones(settings, settings.resume_cache_topic, doomed)

    return forget


def _fail(message: str) -> int:
    print(f"runtrail prune: {message}", file=sys.stderr)
    return EXIT_USAGE
