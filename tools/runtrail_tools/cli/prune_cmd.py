"""``runtrail prune``: apply retention to the stores named (age, or the latest N checkpoints).

``--older-than DAYS`` prunes, in each store given, what is older: ``--content`` (the configured
content store: sealed objects; their references then read as erased), ``--sessions-store URL``
(session snapshots not updated since), ``--capture-sink file:///dir`` (whole days of capture
records). ``--keep-checkpoints N --checkpoints-store URL --tenant T`` keeps the latest N
checkpoints of every LangGraph thread of the tenant. Prints what it deleted as one JSON line.
See ``docs/PRIVACY.md`` ("Retention").
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import orjson

from runtrail_tools.cli.common import add_common_flags, settings_from_args

EXIT_OK, EXIT_USAGE = 0, 2
DAY_S = 86_400


def register(subparsers: Any) -> None:
    prune = subparsers.add_parser(
        "prune",
        help="apply retention: delete what is older, or beyond the latest N checkpoints",
        description="Delete, in each store named, what the retention policy no longer keeps.",
    )
    prune.add_argument("--older-than", type=float, metavar="DAYS", help="age limit, in days")
    prune.add_argument("--content", action="store_true", help="prune the content store")
    prune.add_argument("--sessions-store", metavar="URL", help="prune this session store")
    prune.add_argument("--capture-sink", metavar="URL", help="prune this file:// capture sink")
    prune.add_argument("--checkpoints-store", metavar="URL", help="LangGraph checkpoint store")
    prune.add_argument("--keep-checkpoints", type=int, metavar="N", help="latest N per thread")
    add_common_flags(prune)
    prune.set_defaults(func=run_prune)


def run_prune(args: argparse.Namespace) -> int:
    from runtrail.persistence import open_store
    from runtrail.persistence.kinds import SESSION_SNAPSHOTS
    from runtrail.persistence.urls import file_path
    from runtrail.privacy import retention
    from runtrail.privacy.protect import vault_from_settings

    aged = args.content or args.sessions_store or args.capture_sink
    if aged and args.older_than is None:
        return _fail("--content, --sessions-store and --capture-sink need --older-than DAYS")
    if (args.keep_checkpoints is None) != (args.checkpoints_store is None):
        return _fail("--keep-checkpoints and --checkpoints-store go together")
    if not aged and args.keep_checkpoints is None:
        return _fail("name a store to prune")
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
        try:
            done["sessions"] = retention.prune_sessions(store, cutoff, args.tenant)
        finally:
            store.close()
    if args.capture_sink:
        done["capture"] = retention.prune_capture_days(file_path(args.capture_sink), cutoff)
    if args.keep_checkpoints is not None:
        from runtrail.adapters.langgraph_checkpoint import RuntrailCheckpointSaver

        with RuntrailCheckpointSaver.from_url(
            args.checkpoints_store, tenant_id=settings.tenant
        ) as saver:
            done["checkpointThreads"] = retention.prune_checkpoints(saver, args.keep_checkpoints)
    sys.stdout.write(orjson.dumps(done).decode() + "\n")
    return EXIT_OK


def _fail(message: str) -> int:
    print(f"runtrail prune: {message}", file=sys.stderr)
    return EXIT_USAGE
