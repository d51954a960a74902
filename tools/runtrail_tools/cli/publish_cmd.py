"""``runtrail publish FILE.jsonl``: send JSON-form events from a file (or stdin) to Kafka.

Each non-blank line is one event in its JSON form, parsed strictly (a duplicated key is an
error, not "the last one wins"). Envelope fields ``publish`` would fill (eventId, occurredAt,
correlationId, tenantId, sequence, actor, and schemaVersion: the current version of the type)
may be left out. Lines go through the same :class:`~runtrail.publisher.Publisher` an agent
uses: checked against the limits, redacted, validated, sequenced, spooled if the broker is
down. A rejected line is reported once, with its reason, and never stops the rest: not even
one nested too deep for Python's parser.

Ctrl-C stops between two lines (never inside a publish, which would leave a run's sequence
taken by an event that was never spooled), sends what was accepted (bounded), and says how far
it got and how to send the rest (:func:`_interrupted`); exit 130. ``--from-line K`` sends the
file from line K on, numbering each run as a publish of the whole file would: the lines before
K are read, checked and numbered, not sent (:func:`_number_skipped`).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import IO, Any

import orjson

from runtrail.events import EventError, loads_strict
from runtrail.events.limits import TooDeep
from runtrail.publisher import Publisher
from runtrail_tools.cli.common import add_common_flags, positive_int, settings_from_args

#: Exit statuses: everything accepted / some line rejected / could not run at all / Ctrl-C.
EXIT_OK, EXIT_REJECTED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: How long an interrupted publish still waits for the broker to confirm what it accepted.
INTERRUPTED_WAIT_S = 10.0


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
        "--from-line",
        type=positive_int,
        default=1,
        metavar="K",
        help="send lines K and after only (what an interrupted publish says to continue "
        "with); the lines before K are read to number each run as before, not sent",
    )
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


class _CtrlC:
    """SIGINT while a line is being published only sets ``pressed`` (the loop stops after the
    line); anywhere else (reading the file, waiting at the end) it raises KeyboardInterrupt."""

    def __init__(self) -> None:
        self.pressed = False
        self.busy = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.pressed = True
        if not self.busy:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[_CtrlC]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if getattr(args, "state_dir", None) and "spool_dir" not in settings.model_fields_set:
        # --state-dir moves all local state, the spool included, unless the spool is set apart
        settings = settings.model_copy(update={"spool_dir": settings.state_dir / "spool"})
    timeout = (
        args.timeout if args.timeout is not None else settings.delivery_timeout_ms / 1000 + 10.0
    )
    rejected = accepted = done = 0
    read_all = False
    ctrl_c = _CtrlC()
    try:
        with _open_input(args.file) as stream, ctrl_c.installed():
            try:
                # each rejection is printed below, once; the publisher need not log it too
                publisher = Publisher(settings, topic=args.topic or None, log_rejections=False)
            except Exception as exc:
                print(f"runtrail publish: cannot start the publisher: {exc}", file=sys.stderr)
                return EXIT_USAGE
            try:
                lines = enumerate(stream, start=1)
                if args.from_line > 1:
                    done = _number_skipped(publisher, settings, lines, args.from_line)
                for number, raw in lines:
                    if not raw.strip():
                        continue
                    ctrl_c.busy = True
                    reason = _publish_line(publisher, raw)
                    done = number
                    if reason is None:
                        accepted += 1
                    else:
                        rejected += 1
                        print(f"line {number}: {reason}", file=sys.stderr)
                    ctrl_c.busy = False
                    if ctrl_c.pressed:
                        raise KeyboardInterrupt
                read_all = True
                deadline = time.monotonic() + timeout
                publisher.flush(timeout)
                if publisher.stats().spooling:  # e.g. an older spool, or a broker blip
                    publisher.drain(max(0.0, deadline - time.monotonic()))
            except KeyboardInterrupt:
                ctrl_c.busy = True  # a second Ctrl-C no longer cuts the bounded wait short
                publisher.close(timeout=min(timeout, INTERRUPTED_WAIT_S))
                return _interrupted(
                    args.file, publisher, args.from_line, done, read_all, accepted, rejected
                )
            finally:
                ctrl_c.busy = True
                publisher.close(timeout=min(timeout, 10.0))
    except OSError as exc:
        print(f"runtrail publish: {exc}", file=sys.stderr)
        return EXIT_USAGE
    stats = publisher.stats()
    print(f"sent {stats.sent}, spooled {stats.spool_depth}, rejected {rejected}")
    if stats.spool_depth:
        print(f"spooled events wait in {publisher.spool_path}", file=sys.stderr)
    return EXIT_OK if rejected == 0 else EXIT_REJECTED


def _number_skipped(
    publisher: Publisher, settings: Any, lines: Iterator[tuple[int, bytes]], first: int
) -> int:
    """Read the lines before line ``first`` without sending them: each one the publisher would
    accept numbers its run as the publisher would have (a carried sequence moves the run's
    counter past it, a line without one takes the next number; a rejected line takes none).
    Then the runs continue at those numbers (after what the spool holds, if it holds more).
    The last line read."""
    from runtrail.events.limits import EventLimits
    from runtrail.publisher.pipeline import prepare, validate
    from runtrail.publisher.redaction import default_redactor
    from runtrail.publisher.sequencing import SequenceCounter

    limits = EventLimits.from_settings(settings)
    counter = SequenceCounter()  # the publisher's own numbering rule
    runs: set[tuple[str, str]] = set()
    number = 0
    for number, raw in lines:
        if raw.strip():
            try:
                valid = validate(
                    prepare(parse_line(raw), limits, settings.tenant, default_redactor)
                )
            except (
                Exception
            ):  # as Publisher.submit: rejected (reported when it was sent), no number
                pass
            else:
                tenant, run = valid.event.tenant_id, valid.event.run_id
                used = counter.peek(tenant, run) if valid.assign else valid.event.sequence
                counter.commit(tenant, run, used)
                runs.add((tenant, run))
        if number >= first - 1:
            break
    for tenant, run in runs:
        publisher.set_next_sequence(run, counter.peek(tenant, run), tenant_id=tenant)
    return number


def _interrupted(
    name: str,
    publisher: Publisher,
    first: int,
    line: int,
    read_all: bool,
    accepted: int,
    rejected: int,
) -> int:
    """Say how far an interrupted publish got, and how to send the rest; 130.

    A line without an eventId gets a new one each time it is published, and a line without a
    sequence is numbered per run, 1, 2, 3… in file order. So the file sent again from line 1
    would put its first events on the topic a second time under new eventIds, at sequences
    their runs already hold: another writer's events, which the runtime dead-letters as
    ``sequence-conflict`` and a replay of the topic halts the run at. ``--from-line`` sends
    the rest only, each run numbered on from where it stopped (after the events the spool
    still holds, which the next publisher on it sends first)."""
    stats = publisher.stats()
    held = max(0, accepted - stats.sent)
    where = "after reading all of it" if read_all else f"after line {line:,}"
    source = "stdin" if name == "-" else name
    print(
        f"interrupted {where}: accepted {accepted:,}, sent {stats.sent:,}, "
        f"spooled {held:,}, rejected {rejected:,}",
        file=sys.stdout,
    )
    lines = [
        f"runtrail publish: interrupted {where} of {source}"
        + (f" (sent from line {first:,})" if first > 1 else "")
        + f": {accepted:,} event(s) accepted, {stats.sent:,} confirmed by the broker, "
        f"{held:,} kept in the spool {publisher.spool_path} (the next publisher on it, with "
        "the same spool folder and tenant, sends them first)."
    ]
    if read_all:
        lines.append("Every line was read: nothing is left to send but the spool.")
    else:
        lines.append(
            f"To send the rest, run the same command with --from-line {line + 1} (the "
            + ("same input" if source == "stdin" else "same file")
            + f"): lines 1-{line:,} are read to number each run on, and not sent again. "
            "Not from line 1: its lines would go out again under new eventIds, at sequences "
            "their runs already hold (dead-lettered as sequence-conflict, and a replay of "
            "the topic halts those runs)."
        )
    print("\n".join(lines), file=sys.stderr)
    return EXIT_INTERRUPTED


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
