"""``runtrail capture query`` and ``runtrail replay node``: read captured nodes back, replay one.

``capture query --run R`` prints the run's node records as JSON lines, each record once
(delivery is at-least-once; the reader de-duplicates by recordId). ``replay node ID --mock``
prints the result rebuilt from the record, calling nothing. ``--live`` is the explicit
experiment of seed 000 §2: it calls a model client (made by ``--model-client MODULE:FACTORY``)
once with the captured prompt, or a tool re-invoker (``--tool-reinvoker MODULE:FACTORY``) with
the captured call, and prints the fresh result beside the original.

The sink defaults to the capture service's (``RUNTRAIL_CAPTURE_SINK_URL``, else
``file://<state dir>/capture``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any, cast

import orjson
from pydantic import BaseModel

from runtrail.capture import CaptureReadError, NodeIoRecord, find_record, iter_records
from runtrail.privacy.resolve import Resolver, resolved_record, resolver_from_settings
from runtrail_tools.cli.common import replay_group

#: Exit statuses: done / nothing found (or unreadable sink) / could not run as asked.
EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE = 0, 1, 2


def register(subparsers: Any) -> None:
    capture = subparsers.add_parser(
        "capture", help="query captured node records", description="Query captured node records."
    )
    capture_sub = capture.add_subparsers(dest="capture_command", metavar="COMMAND", required=True)
    query = capture_sub.add_parser(
        "query",
        help="print a run's node records as JSON lines",
        description="Print the node records of a run, one JSON object a line, each record once. "
        "Exits 1 when no record matches.",
    )
    query.add_argument("--run", required=True, help="run ID")
    query.add_argument("--type", choices=("MODEL", "TOOL"), help="only this node type")
    _add_source_flags(query)
    query.set_defaults(func=run_query)

    replay_sub = replay_group(subparsers)
    node = replay_sub.add_parser(
        "node",
        help="rebuild (--mock) or re-invoke (--live) one node",
        description="--mock rebuilds the node's result from the record and calls nothing. "
        "--live calls the model client (MODEL node) or tool re-invoker (TOOL node) made by "
        "the given factory, once, with the captured input, and prints the fresh result "
        "beside the original.",
    )
    node.add_argument("record_id", metavar="RECORD_ID", help="recordId of the node")
    mode = node.add_mutually_exclusive_group(required=True)
    mode.add_argument("--mock", action="store_true", help="rebuild from the record (no calls)")
    mode.add_argument("--live", action="store_true", help="re-invoke the node (real calls)")
    node.add_argument(
        "--model-client",
        metavar="MODULE:FACTORY",
        help="for --live on a MODEL node: FACTORY() returns an object with create(prompt)",
    )
    node.add_argument(
        "--tool-reinvoker",
        metavar="MODULE:FACTORY",
        help="for --live on a TOOL node: FACTORY() returns a callable(ToolCall) -> result",
    )
    _add_source_flags(node)
    node.set_defaults(func=run_replay)


def _add_source_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", help="only this tenant's records")
    parser.add_argument(
        "--sink",
        metavar="URL",
        help="file:///dir or s3://bucket/prefix?… (default: RUNTRAIL_CAPTURE_SINK_URL, "
        "else file://<state dir>/capture)",
    )
    parser.add_argument("--state-dir", help="local state folder (RUNTRAIL_STATE_DIR)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")


def sink_url(args: argparse.Namespace) -> str:
    """``--sink``, else the capture service's configured sink."""
    if args.sink:
        return str(args.sink)
    from runtrail.config import load_settings
    from runtrail_services.capture.settings import CaptureSettings

    state_dir = load_settings(state_dir=args.state_dir).state_dir
    return CaptureSettings.load().resolved_sink_url(state_dir)


def _resolver(args: argparse.Namespace) -> Resolver:
    """Protected content is shown to whoever can open the key store (RUNTRAIL_CONTENT_STORE_URL,
    RUNTRAIL_KEY_STORE_URL); erased content as the erased marker."""
    from runtrail.config import load_settings

    return resolver_from_settings(load_settings(state_dir=args.state_dir))


def _fail(status: int, message: str) -> int:
    print(f"runtrail: {message}", file=sys.stderr)
    return status


# --- capture query ------------------------------------------------------------------------------
def run_query(args: argparse.Namespace) -> int:
    found = 0
    resolver = _resolver(args)
    try:
        for record in iter_records(sink_url(args), args.run, args.type, args.tenant):
            sys.stdout.write(resolved_record(resolver, record).to_json_line().decode())
            found += 1
    except (CaptureReadError, OSError) as exc:
        return _fail(EXIT_NOT_FOUND, str(exc))
    finally:
        resolver.close()
    sys.stdout.flush()
    if not found:
        return _fail(EXIT_NOT_FOUND, f"no records of run {args.run!r}")
    return EXIT_OK


# --- replay node --------------------------------------------------------------------------------
def run_replay(args: argparse.Namespace) -> int:
    # imported where it runs: `capture query` needs neither the replay nor the event model
    from runtrail.capture.replay import ReplayError

    try:
        record = find_record(sink_url(args), args.record_id, tenant=args.tenant)
    except (CaptureReadError, OSError) as exc:
        return _fail(EXIT_NOT_FOUND, str(exc))
    if record is None:
        return _fail(EXIT_NOT_FOUND, f"no record {args.record_id!r}")
    resolver = _resolver(args)
    try:
        record = resolved_record(resolver, record)
    finally:
        resolver.close()
    head = {"recordId": record.record_id, "nodeId": record.node_id, "nodeType": record.node_type}
    try:
        if args.mock:
            answer = {**head, "mode": "mock", "result": original_result(record)}
        else:
            answer = {**head, "mode": "live", **live_and_original(record, args)}
    except (ReplayError, FactoryError) as exc:
        return _fail(EXIT_USAGE, str(exc))
    sys.stdout.write(to_json(answer) + "\n")
    sys.stdout.flush()
    return EXIT_OK


def original_result(record: NodeIoRecord) -> Any:
    """The node's captured result: a MODEL node's mock replay, a TOOL node's captured outputs."""
    from runtrail.capture.replay import replay_model_mock

    if record.node_type == "TOOL":
        return record.outputs
    mock = replay_model_mock(record)
    return {
        "raw": mock.raw,
        "outputText": mock.output_text,
        "reasoningText": mock.reasoning_text,
        "inputTokens": mock.input_tokens,
        "outputTokens": mock.output_tokens,
        "source": mock.source,
    }


def live_and_original(record: NodeIoRecord, args: argparse.Namespace) -> dict[str, Any]:
    """``{"original": …, "live": …}``: one real call through the factory's client."""
    from runtrail.capture.replay import replay_model_live, replay_tool_live

    if record.node_type == "MODEL":
        client = make(args.model_client, "--model-client", "a MODEL node")
        if not callable(getattr(client, "create", None)):
            raise FactoryError(f"{args.model_client} made {client!r}, which has no create(prompt)")
        fresh = replay_model_live(record, client)
    else:
        reinvoker = make(args.tool_reinvoker, "--tool-reinvoker", "a TOOL node")
        if not callable(reinvoker):
            raise FactoryError(f"{args.tool_reinvoker} made {reinvoker!r}, which is not callable")
        fresh = replay_tool_live(record, reinvoker)
    return {"original": original_result(record), "live": fresh}


class FactoryError(ValueError):
    """``MODULE:FACTORY`` is missing, malformed, or does not make what is needed."""


def load_factory(spec: str, flag: str) -> Callable[[], Any]:
    """Import ``MODULE:FACTORY`` (FACTORY may be dotted) without calling it, so a wrong spec
    fails where it is given, naming the flag and the spec."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise FactoryError(f"{flag} expects MODULE:FACTORY, got {spec!r}")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise FactoryError(f"{flag} {spec}: {exc}") from exc
    if not callable(target):
        raise FactoryError(f"{flag} {spec} is not callable")
    return cast("Callable[[], Any]", target)


def make(spec: str | None, flag: str, what: str) -> Any:
    """Import ``MODULE:FACTORY`` and call it with no arguments."""
    if not spec:
        raise FactoryError(f"--live on {what} needs {flag} MODULE:FACTORY")
    return load_factory(spec, flag)()


def _default(value: Any) -> Any:
    """JSON for what a client may return: pydantic models, mappings, else the repr."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, Mapping):
        return dict(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    return repr(value)


def to_json(value: Any) -> str:
    """Indented JSON (so a live result reads beside the original)."""
    options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
    return orjson.dumps(value, default=_default, option=options).decode()
