"""``runtrail publish FILE.jsonl``: send JSON-form events from a file (or stdin) to Kafka.

Each non-blank line is one event in its JSON form, parsed strictly (a duplicated key is an
error, not "the last one wins"). Envelope fields ``publish`` would fill (eventId, occurredAt,
correlationId, tenantId, sequence, actor, and schemaVersion: the current version of the type)
may be left out. Lines go through the same :class:`~runtrail.publisher.Publisher` an agent
uses: checked against the limits, redacted, validated, sequenced, spooled if the broker is
down. A rejected line is reported once, with its reason, and never stops the rest: not even
one nested too deep for Python's parser.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

import orjson

from runtrail.events import EventError, loads_strict
from runtrail.events.limits import TooDeep
from runtrail.publisher import Publisher
from runtrail_tools.cli.common import add_common_flags, settings_from_args

#: Exit statuses: everything accepted / some line rejected / could not run at all.
EXIT_OK, EXIT_REJECTED, EXIT_USAGE = 0, 1, 2


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "publish",
        help="publish JSON-form events from a JSONL file",
        description=(
            "Publish events, one JSON object per line, to the events topic. Prints "
            "'sent N, spooled N, rejected N' (spooled: waiting in the local spool because the "
            "broker did not take them in time) and 'line K: <reason>' for each rejected line "
            "on stderr. Exits 1 if any line was rejected."
        ),
    )
    parser.add_argument("file", metavar="FILE.jsonl", help="events file, or '-' for stdin")
    parser.add_argument("--topic", help="topic to publish to (default: the events topic)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long to wait for delivery at the end (default: delivery timeout + 10 s)",
    )
    add_common_flags(parser)
    parser.set_defaults(func=run)


@contextlib.contextmanager
def _open_input(name: str) -> Iterator[IO[bytes]]:
    if name == "-":
        yield sys.stdin.buffer
    else:
        with open(name, "rb") as stream:
            yield stream


def _parse_compact(raw: bytes) -> Any:
    """``raw`` parsed by orjson when it is already orjson's own compact text, else None.

    Why: ``loads_strict`` runs a Python hook per object to refuse duplicate keys (about 25 µs
    a line, a third of the CLI's cost). When re-serializing the parsed value gives back the
    line byte for byte, the line held no duplicate key (the output names each key once, so a
    duplicate would make it shorter), no NaN/Infinity (orjson refuses them) and no number or
    string spelled another way, so the value is exactly the one ``loads_strict`` would give.
    Any other line (spaces, escapes, ``1e2``, a parse error) takes the strict path unchanged.
    """
    line = raw.rstrip(b"\r\n")
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    try:
        same = orjson.dumps(value) == line
    except TypeError:
        return None
    return value if same else None


def parse_line(raw: bytes) -> dict[str, Any]:
    """One line as a JSON object; raises ``ValueError`` (or an ``EventError``) with the reason."""
    value = _parse_compact(raw)
    if type(value) is dict:
        return value
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"invalid-utf8: {exc}") from None
    try:
        value = loads_strict(text)
    except EventError as exc:
        raise ValueError(f"{exc.reason}: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"invalid-json: {exc}") from None
    except RecursionError:
        raise ValueError(
            f"{TooDeep.reason}: the line is nested too deep to parse "
            "(RUNTRAIL_MAX_JSON_DEPTH limits nesting)"
        ) from None
    if not isinstance(value, dict):
        raise ValueError(
            f"invalid-event: a line must hold one JSON object, not {type(value).__name__}"
        )
    return value


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if getattr(args, "state_dir", None) and "spool_dir" not in settings.model_fields_set:
        # --state-dir moves all local state, the spool included, unless the spool is set apart
        settings = settings.model_copy(update={"spool_dir": settings.state_dir / "spool"})
    timeout = (
        args.timeout if args.timeout is not None else settings.delivery_timeout_ms / 1000 + 10.0
    )
    rejected = 0
    try:
        with _open_input(args.file) as stream:
            try:
                # each rejection is printed below, once; the publisher need not log it too
                publisher = Publisher(settings, topic=args.topic or None, log_rejections=False)
            except Exception as exc:
                print(f"runtrail publish: cannot start the publisher: {exc}", file=sys.stderr)
                return EXIT_USAGE
            try:
                for number, raw in enumerate(stream, start=1):
                    if not raw.strip():
                        continue
                    reason = _publish_line(publisher, raw)
                    if reason is not None:
                        rejected += 1
                        print(f"line {number}: {reason}", file=sys.stderr)
                deadline = time.monotonic() + timeout
                publisher.flush(timeout)
                if publisher.stats().spooling:  # e.g. an older spool, or a broker blip
                    publisher.drain(max(0.0, deadline - time.monotonic()))
            finally:
                publisher.close(timeout=min(timeout, 10.0))
    except OSError as exc:
        print(f"runtrail publish: {exc}", file=sys.stderr)
        return EXIT_USAGE
    stats = publisher.stats()
    print(f"sent {stats.sent}, spooled {stats.spool_depth}, rejected {rejected}")
    if stats.spool_depth:
        print(f"spooled events wait in {publisher.spool_path}", file=sys.stderr)
    return EXIT_OK if rejected == 0 else EXIT_REJECTED


def _publish_line(publisher: Publisher, raw: bytes) -> str | None:
    """Publish one line; the rejection reason, or None when it was accepted."""
    try:
        form = parse_line(raw)
    except ValueError as exc:
        return str(exc)
    result = publisher.submit(form)
    if result.accepted:
        return None
    return f"{result.reason}: {result.detail}"
