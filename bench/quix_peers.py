"""The peers: what a user would write on Quix Streams for runtrail's ``noop`` and ``capture``.

Quix Streams is a benchmark extra (``pip install -e '.[bench]'``), never a runtime dependency.
Both apps run on this thread until they processed ``expected`` messages, timed like the
runtime's services: from the first message to the last.

- :func:`quix_decode`: the same decode as ``noop`` — the single-object header, the writer
  schema by fingerprint, fastavro's body decode, the JSON-text fields parsed.
- :func:`quix_capture`: pairs the same MODEL and TOOL nodes with plain dicts (seed 000's rules
  on an in-order stream, the ID and text helpers of :mod:`runtrail.nodes` and
  :mod:`runtrail.capture.record`) and writes them with orjson through a Quix ``BatchingSink``,
  which writes and fsyncs before Quix commits: the same JSONL lines as the capture service.
"""

from __future__ import annotations

import io
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from fastavro import schemaless_reader

from bench.harness import Rate
from runtrail.capture.layout import tenant_segment
from runtrail.capture.record import derive_record_id, model_node_id, tool_node_id
from runtrail.capture.times import epoch_ms, utc_date
from runtrail.events import avro_schemas
from runtrail.nodes import (
    append_reasoning,
    append_text,
    call_key,
    keep_last,
    non_empty,
    parse_usage,
)

HEADER_LEN = 10
#: how often the Quix apps commit (its default, set explicitly); bench.contender runs the
#: runtrail services at the same interval, so both flush their output and commit as often
COMMIT_INTERVAL_S = 5.0


class _Counter:
    """Counts processed messages, marks first and last, stops the app at ``expected``."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.seen = 0
        self.first = 0.0
        self.last = 0.0
        self.stop: Callable[[], None] = lambda: None

    def tick(self) -> None:
        if not self.seen:
            self.first = time.perf_counter()
        self.seen += 1
        if self.seen >= self.expected:
            self.last = time.perf_counter()
            self.stop()


def _deserializer() -> Any:
    from quixstreams.models.serializers import Deserializer

    schemas = {s.fingerprint: s for s in avro_schemas.retained_schemas()}

    class SingleObjectAvro(Deserializer):  # type: ignore[misc]
        """fastavro on the single-object encoding, the JSON-text fields parsed."""

        def __call__(self, value: bytes, ctx: Any) -> Any:
            schema = schemas[value[2:HEADER_LEN]]
            body = io.BytesIO(value)
            body.seek(HEADER_LEN)
            record = schemaless_reader(body, schema.parsed, None)
            data = record["data"]
            for name in schema.json_fields:
                text = data.get(name)
                if text is not None:
                    data[name] = orjson.loads(text)
            return record

    return SingleObjectAvro()


def _app(bootstrap: str, name: str) -> Any:
    from quixstreams import Application

    return Application(
        broker_address=bootstrap,
        consumer_group=f"bench-quix-{name}-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        auto_create_topics=False,
        use_changelog_topics=False,
        commit_interval=COMMIT_INTERVAL_S,
        loglevel="WARNING",
        state_dir=Path(".runtrail/bench-quix-state").resolve(),
    )


def _run(app: Any, counter: _Counter, name: str) -> Rate:
    counter.stop = app.stop
    app.run()
    if counter.seen < counter.expected:
        raise SystemExit(f"the Quix app {name} stopped after {counter.seen} messages")
    return Rate(name, counter.seen, counter.last - counter.first)


def quix_decode(bootstrap: str, topic: str, expected: int) -> Rate:
    """A Quix Streams app doing ``noop``'s decode."""
    app = _app(bootstrap, "decode")
    counter = _Counter(expected)
    sdf = app.dataframe(app.topic(topic, value_deserializer=_deserializer()))

    def seen(value: Any) -> None:
        counter.tick()

    sdf.update(seen)
    return _run(app, counter, "Quix Streams app, same decode")


class PlainPairer:
    """Seed 000's MODEL/TOOL pairing on an in-order stream, with plain dicts."""

    def __init__(self) -> None:
        self._models: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._tools: dict[tuple[Any, ...], list[dict[str, Any]]] = {}

    def feed(self, e: dict[str, Any]) -> dict[str, Any] | None:
        kind = e["type"]
        key = (e["tenantId"], e["runId"], e.get("turnId"), e.get("step"))
        data = e["data"]
        if kind == "MODEL_REQUEST":
            node = self._models[key] = _node("MODEL", e)
            node["inputs"] = prompt = data["prompt"]
            model = prompt.get("model") if isinstance(prompt, dict) else None
            node["model"] = model if isinstance(model, str) else None
            return None
        if kind in ("MODEL_RESPONSE", "MODEL_REASONING", "MODEL_RETRY"):
            node = self._models.get(key)
            if node is None:
                return None
            _touch(node, e)
            if kind == "MODEL_RESPONSE":
                node["text"] = append_text(node["text"], data.get("message"))
                raw = data.get("raw")
                if non_empty(raw):
                    node["raw"] = raw
                    node["tokens"] = keep_last(node["tokens"], parse_usage(raw))
            elif kind == "MODEL_REASONING":
                node["reasoning"] = append_reasoning(node["reasoning"], data.get("text"))
            else:
                node["retries"] += 1
            return None
        if kind == "STEP_END":
            node = self._models.pop(key, None)
            if node is None:
                return None
            _touch(node, e)
            return _record(node)
        if kind == "TOOL_CALL":
            tkey = (*key, call_key(data.get("callId"), data.get("toolName")))
            node = _node("TOOL", e)
            node["call_key"] = tkey[-1]
            node["inputs"] = data
            self._tools.setdefault(tkey, []).append(node)
            return None
        if kind == "TOOL_RESULT":
            tkey = (*key, call_key(data.get("callId"), data.get("toolName")))
            queue = self._tools.get(tkey)
            if queue:
                node = queue.pop(0)
                if not queue:
                    del self._tools[tkey]
                _touch(node, e)
            else:
                node = _node("TOOL", e)
                node["call_key"] = tkey[-1]
            node["raw"] = data
            return _record(node)
        return None


def _node(node_type: str, e: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": node_type,
        "event": e,
        "ids": [e["eventId"]],
        "session": e.get("sessionId"),
        "last_at": e["occurredAt"],
        "inputs": None,
        "model": None,
        "text": "",
        "raw": None,
        "reasoning": "",
        "retries": 0,
        "tokens": (None, None),
        "call_key": "",
    }


def _touch(node: dict[str, Any], e: dict[str, Any]) -> None:
    node["ids"].append(e["eventId"])
    node["last_at"] = e["occurredAt"]
    if node["session"] is None:
        node["session"] = e.get("sessionId")


def _record(node: dict[str, Any]) -> dict[str, Any]:
    """The capture record, field for field as ``NodeIoRecord``'s JSON form."""
    e = node["event"]
    run, turn, step = e["runId"], e.get("turnId"), e.get("step")
    started, captured = epoch_ms(e["occurredAt"]), epoch_ms(node["last_at"])
    if node["type"] == "MODEL":
        node_id = model_node_id(run, turn, step)
        tokens = node["tokens"]
    else:
        node_id = tool_node_id(run, turn, step, node["call_key"])
        tokens = (None, None)
    return {
        "recordId": derive_record_id(e["tenantId"], node_id, node["ids"]),
        "tenantId": e["tenantId"],
        "runId": run,
        "sessionId": node["session"],
        "turnId": turn,
        "step": step,
        "nodeType": node["type"],
        "nodeId": node_id,
        "modelId": node["model"],
        "inputs": node["inputs"],
        "outputText": node["text"],
        "outputs": node["raw"],
        "startedAtEpochMs": started,
        "capturedAtEpochMs": captured,
        "durationMs": max(0, captured - started),
        "reasoningText": node["reasoning"],
        "retryCount": node["retries"],
        "inputTokens": tokens[0],
        "outputTokens": tokens[1],
        "sourceEventIds": node["ids"],
        "incomplete": False,
        "incompleteReason": None,
    }


def _jsonl_sink(directory: Path) -> Any:
    from quixstreams.sinks import BatchingSink, SinkBatch

    class JsonlSink(BatchingSink):  # type: ignore[misc]
        """One file per tenant and capture date; written and fsynced before Quix commits."""

        def __init__(self) -> None:
            super().__init__()
            self._files: dict[tuple[str, str], int] = {}

        def setup(self) -> None:
            directory.mkdir(parents=True, exist_ok=True)

        def write(self, batch: SinkBatch) -> None:
            lines: dict[tuple[str, str], list[bytes]] = {}
            for item in batch:
                record = item.value
                where = (tenant_segment(record["tenantId"]), utc_date(record["capturedAtEpochMs"]))
                lines.setdefault(where, []).append(orjson.dumps(record) + b"\n")
            for where, chunk in lines.items():
                fd = self._files.get(where)
                if fd is None:
                    folder = directory.joinpath(*where)
                    folder.mkdir(parents=True, exist_ok=True)
                    path = folder / f"capture-{len(self._files)}.jsonl"
                    fd = self._files[where] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                os.write(fd, b"".join(chunk))
                os.fsync(fd)

    return JsonlSink()


def quix_capture(bootstrap: str, topic: str, expected: int, directory: Path) -> Rate:
    """A Quix Streams app pairing the same nodes and writing the same JSONL lines."""
    app = _app(bootstrap, "capture")
    counter = _Counter(expected)
    pairer = PlainPairer()
    sdf = app.dataframe(app.topic(topic, value_deserializer=_deserializer()))

    def pair(value: Any) -> list[dict[str, Any]]:
        record = pairer.feed(value)
        counter.tick()
        return [] if record is None else [record]

    sdf = sdf.apply(pair, expand=True)
    sdf.sink(_jsonl_sink(directory))
    return _run(app, counter, "Quix app pairing the same nodes, orjson JSONL")
