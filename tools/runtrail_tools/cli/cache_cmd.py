"""``runtrail cache``: inspect and move the resume cache.

* ``cache stats`` — entries per tenant and kind, open intents, runs, consumed offsets.
* ``cache get --tenant T (--model-prompt FILE | --tool NAME --args JSON) [--run R]`` — one
  entry, as JSON; exit 1 on a miss. ``--run`` restricts to that run's entries (the decorators'
  default scope); without it, any run of the tenant. ``--service URL --token TOKEN`` asks the
  running service's API instead of reading the store.
* ``cache export FILE [--tenant T]`` / ``cache import FILE`` — the ``save_json`` file format,
  so an export loads into an in-process ``ResumeCache.load_json`` and back. Import restores
  everything export writes: entries *and* open intents (a call whose outcome is unknown must
  stay unknown after the move, never become a miss that re-runs it). Intents are filed under
  their run's events-topic partition (``--partitions N``, else asked of the broker), where the
  service finds them on assignment. Imported records also go to the compacted cache topic
  (``--no-topic`` to skip), so topic readers see them.

The store defaults to the service's (``RUNTRAIL_RESUME_CACHE_STORE_URL``, else
``sqlite:///<state dir>/resume-cache.db``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtrail.config import Settings
from runtrail.persistence.migrations import Opening
from runtrail_tools.cli.common import add_common_flags, settings_from_args
from runtrail_tools.cli.store_open import open_store_or_explain

if TYPE_CHECKING:
    from runtrail.resume.store import CacheStore

EXIT_OK, EXIT_MISS, EXIT_USAGE = 0, 1, 2


def register(subparsers: Any) -> None:
    cache = subparsers.add_parser(
        "cache", help="inspect the resume cache", description="Inspect and move the resume cache."
    )
    sub = cache.add_subparsers(dest="cache_command", metavar="COMMAND", required=True)

    stats = sub.add_parser("stats", help="entry counts, open intents, offsets (JSON)")
    _store_flags(stats)
    stats.set_defaults(func=run_stats)

    get = sub.add_parser(
        "get", help="look one entry up", description="Print one entry as JSON; exit 1 on a miss."
    )
    what = get.add_mutually_exclusive_group(required=True)
    what.add_argument("--model-prompt", metavar="FILE", help="JSON file holding the prompt")
    what.add_argument("--tool", metavar="NAME", help="tool name (with --args)")
    get.add_argument("--args", metavar="JSON", default="null", help="tool arguments as JSON")
    get.add_argument("--run", help="only this run's entries (default: any run of the tenant)")
    get.add_argument("--service", metavar="URL", help="ask the service's API at URL instead")
    get.add_argument("--token", help="bearer token for --service")
    _store_flags(get)
    get.set_defaults(func=run_get)

    export = sub.add_parser("export", help="write entries and open intents to a JSON file")
    export.add_argument("file", type=Path)
    _store_flags(export)
    export.set_defaults(func=run_export)

    imp = sub.add_parser(
        "import", help="load entries and open intents from a JSON file into the store"
    )
    imp.add_argument("file", type=Path)
    imp.add_argument(
        "--no-topic", action="store_true", help="do not also write them to the cache topic"
    )
    imp.add_argument(
        "--partitions",
        type=int,
        metavar="N",
        help="partitions of the events topic, to file open intents under their run's partition "
        "(default: asked of the broker)",
    )
    _store_flags(imp)
    imp.set_defaults(func=run_import)


def _store_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store-url", help="sqlite:///path.db or postgresql://… (default: the service's)"
    )
    add_common_flags(parser)


def _store_url(args: argparse.Namespace, settings: Settings) -> str:
    from runtrail_services.resume_cache.settings import ResumeCacheSettings

    return str(args.store_url or ResumeCacheSettings().resolved_store_url(settings.state_dir))


def _open_store(
    args: argparse.Namespace, settings: Settings, mode: Opening = "existing"
) -> CacheStore:
    """The cache store, or a one-line answer naming it when it cannot be opened; a command
    that reads never makes one (``mode``: the store keeps its own bookkeeping when opened, so
    it is opened as an existing store rather than read-only)."""
    from runtrail.persistence import open_store
    from runtrail.persistence.kinds import RESUME_ENTRIES

    url = _store_url(args, settings)
    return open_store_or_explain(
        "resume-cache", url, lambda: open_store(RESUME_ENTRIES, url, readers=1), mode=mode
    )


def _print(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True) + "\n")


def run_stats(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    store = _open_store(args, settings)
    try:
        _print(store.stats())
    finally:
        store.close()
    return EXIT_OK


def run_get(args: argparse.Namespace) -> int:
    from runtrail.resume.keys import Kind, Scope, model_key, tool_key

    settings = settings_from_args(args)
    try:
        if args.model_prompt:
            kind, key = Kind.MODEL, model_key(json.loads(Path(args.model_prompt).read_text()))
        else:
            kind, key = Kind.TOOL, tool_key(args.tool, json.loads(args.args))
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"cache get: {exc}\n")
        return EXIT_USAGE
    scope = Scope.RUN if args.run else Scope.TENANT
    tenant = settings.tenant
    if args.service:
        return _get_from_service(args, tenant, kind, key, scope)
    store = _open_store(args, settings)
    try:
        entry = store.get_entry(tenant, args.run or "", kind, key, scope)
    finally:
        store.close()
    if entry is None:
        sys.stderr.write(f"miss: no {kind.value} entry {key} for tenant {tenant!r}\n")
        return EXIT_MISS
    _print(entry.to_json())
    return EXIT_OK


def _get_from_service(
    args: argparse.Namespace, tenant: str, kind: Any, key: str, scope: Any
) -> int:
    from runtrail.resume.errors import CacheUnavailable
    from runtrail.resume.http_client import ServiceCacheClient

    if not args.token:
        sys.stderr.write("cache get: --service needs --token\n")
        return EXIT_USAGE
    client = ServiceCacheClient(args.service, args.token, wait_ms=0)
    try:
        answer = client.lookup(
            tenant=tenant, run_id=args.run or "-", kind=kind, key=key, scope=scope, min_offsets={}
        )
    except CacheUnavailable as exc:
        sys.stderr.write(f"cache get: {exc}\n")
        return EXIT_USAGE
    finally:
        client.close()
    if answer.entry is None:
        sys.stderr.write(f"miss: no {kind.value} entry {key} for tenant {tenant!r}\n")
        return EXIT_MISS
    _print(answer.entry.to_json())
    return EXIT_OK


def run_export(args: argparse.Namespace) -> int:
    from runtrail.resume.persistence import write_cache_file

    settings = settings_from_args(args)
    tenant = args.tenant  # only the tenant given on the command line, else every tenant
    store = _open_store(args, settings)
    try:
        count = write_cache_file(args.file, store.entries(tenant), store.intents(tenant))
    finally:
        store.close()
    sys.stderr.write(f"exported {count} entries to {args.file}\n")
    return EXIT_OK


def run_import(args: argparse.Namespace) -> int:
    from runtrail.resume.partitioning import partition_for
    from runtrail.resume.persistence import CacheFileError, read_cache_file
    from runtrail.resume.records import entry_record, intent_record

    settings = settings_from_args(args)
    if not args.file.exists():
        sys.stderr.write(f"cache import: {args.file} does not exist\n")
        return EXIT_USAGE
    try:
        entries, intents = read_cache_file(args.file)
    except CacheFileError as exc:
        sys.stderr.write(f"cache import: {exc}\n")
        return EXIT_USAGE
    partitions = args.partitions
    if intents and partitions is None:
        try:
            partitions = _events_partitions(settings)
        except RuntimeError as exc:
            sys.stderr.write(f"cache import: {exc}; give --partitions N\n")
            return EXIT_USAGE
    if partitions is not None and partitions < 1:
        sys.stderr.write(f"cache import: --partitions must be at least 1, got {partitions}\n")
        return EXIT_USAGE
    store = _open_store(args, settings, mode="create")
    try:
        added = store.import_entries(entries)
        opened = store.import_intents(
            intents,
            settings.events_topic,
            lambda run_id: partition_for(run_id, partitions or 1),
        )
    finally:
        store.close()
    if not args.no_topic and (entries or intents):
        from runtrail_services.resume_cache.topic_writer import CacheTopicWriter, ensure_cache_topic

        ensure_cache_topic(settings)
        writer = CacheTopicWriter(settings)
        try:
            writer.write([entry_record(e) for e in entries] + [intent_record(i) for i in intents])
        finally:
            writer.close()
    sys.stderr.write(
        f"imported {added} new of {len(entries)} entries and {opened} new of {len(intents)} "
        f"open intents from {args.file}\n"
    )
    return EXIT_OK


def _events_partitions(settings: Settings, timeout: float = 10.0) -> int:
    """How many partitions the events topic has, from the broker (RuntimeError naming it)."""
    from confluent_kafka import KafkaException

    from runtrail.kafka.admin import admin_client

    topic = settings.events_topic
    try:
        metadata = admin_client(settings.kafka_config()).list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise RuntimeError(
            f"cannot ask {settings.bootstrap_servers} how many partitions topic {topic!r} has: "
            f"{exc}"
        ) from exc
    described = metadata.topics.get(topic)
    if described is None or described.error is not None or not described.partitions:
        raise RuntimeError(f"topic {topic!r} does not exist on {settings.bootstrap_servers}")
    return len(described.partitions)
