"""What the resume cache holds: completed results (entries), open tool calls (intents), run state.

All three have one JSON form (camelCase, like the events), used by ``save_json`` files, the
compacted cache topic, the HTTP API and the SQL stores alike, so a file exported from the
service loads into an in-process :class:`~runtrail.resume.cache.ResumeCache` and back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtrail.camel_json import camel_fields
from runtrail.resume.keys import Kind

JsonDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ModelResult:
    """A model call's terminal result: the response text and the provider's raw payload.

    Built from events the way capture accumulates them (seed 000 §1.2): ``message`` is every
    streamed delta concatenated, ``raw`` the latest non-empty payload.
    """

    message: str | None = None
    raw: Any = None

    def to_json(self) -> JsonDict:
        return {"message": self.message, "raw": self.raw}

    @classmethod
    def from_json(cls, value: Any) -> ModelResult:
        if not isinstance(value, Mapping):
            raise ValueError("a model result is a JSON object with message and raw")
        message = value.get("message")
        if message is not None and not isinstance(message, str):
            raise ValueError("a model result's message is a string or null")
        return cls(message=message, raw=value.get("raw"))


def _opt_str(value: Any, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{name} must be a string or null")


def _opt_int(value: Any, name: str) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"{name} must be an integer or null")


def _req_str(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One completed node: ``key`` (see :mod:`.keys`) → ``result``, scoped by tenant and run.

    ``result`` is a :meth:`ModelResult.to_json` object for MODEL entries and the tool's output
    for TOOL entries. The coordinates say where the result was first recorded.
    """

    tenant_id: str
    run_id: str
    kind: Kind
    key: str
    result: Any
    step: int | None = None
    turn_id: str | None = None
    call_id: str | None = None
    tool_name: str | None = None

    def model_result(self) -> ModelResult:
        return ModelResult.from_json(self.result)

    def to_json(self) -> JsonDict:
        return camel_fields(self, kind=self.kind.value)

    @classmethod
    def from_json(cls, data: Any) -> CacheEntry:
        if not isinstance(data, Mapping):
            raise ValueError("a cache entry is a JSON object")
        kind = Kind(str(data.get("kind")))
        entry = cls(
            tenant_id=_req_str(data, "tenantId"),
            run_id=_req_str(data, "runId"),
            kind=kind,
            key=_req_str(data, "key"),
            result=data.get("result"),
            step=_opt_int(data.get("step"), "step"),
            turn_id=_opt_str(data.get("turnId"), "turnId"),
            call_id=_opt_str(data.get("callId"), "callId"),
            tool_name=_opt_str(data.get("toolName"), "toolName"),
        )
        if kind is Kind.MODEL:
            ModelResult.from_json(entry.result)  # validates the shape
        return entry


@dataclass(frozen=True, slots=True)
class Intent:
    """A TOOL_CALL without a TOOL_RESULT: the tool may or may not have taken effect."""

    tenant_id: str
    run_id: str
    intent_id: str
    key: str
    tool_name: str | None
    call_id: str | None
    arguments: Any = None
    step: int | None = None
    turn_id: str | None = None
    session_id: str | None = None

    def to_json(self) -> JsonDict:
        return camel_fields(self)

    @classmethod
    def from_json(cls, data: Any) -> Intent:
        if not isinstance(data, Mapping):
            raise ValueError("an intent is a JSON object")
        return cls(
            tenant_id=_req_str(data, "tenantId"),
            run_id=_req_str(data, "runId"),
            intent_id=_req_str(data, "intentId"),
            key=_req_str(data, "key"),
            tool_name=_opt_str(data.get("toolName"), "toolName"),
            call_id=_opt_str(data.get("callId"), "callId"),
            arguments=data.get("arguments"),
            step=_opt_int(data.get("step"), "step"),
            turn_id=_opt_str(data.get("turnId"), "turnId"),
            session_id=_opt_str(data.get("sessionId"), "sessionId"),
        )


@dataclass(frozen=True, slots=True)
class RunState:
    """What a resumed run needs from the record: where its sequence stands, what is unresolved."""

    tenant_id: str
    run_id: str
    last_sequence: int = 0
    open_intents: tuple[Intent, ...] = field(default=())

    @property
    def seen(self) -> bool:
        """Whether any event of the run was recorded (so this is a resume, not a first run)."""
        return self.last_sequence > 0

    def to_json(self) -> JsonDict:
        return camel_fields(self, open_intents=[i.to_json() for i in self.open_intents])

    @classmethod
    def from_json(cls, data: Any) -> RunState:
        if not isinstance(data, Mapping):
            raise ValueError("a run state is a JSON object")
        last = _opt_int(data.get("lastSequence"), "lastSequence") or 0
        intents = data.get("openIntents") or []
        if not isinstance(intents, list):
            raise ValueError("openIntents must be a list")
        return cls(
            tenant_id=_req_str(data, "tenantId"),
            run_id=_req_str(data, "runId"),
            last_sequence=last,
            open_intents=tuple(Intent.from_json(i) for i in intents),
        )
