"""``NodeIoRecord``: the complete input and output of one model or tool node (seed 000 §1.5).

The JSON form uses the seed's camelCase field names and is what the JSONL and object-store
sinks hold, one record a line. Records are self-describing: cost accounting and audit need no
knowledge of the provider's payload shapes.

Identifiers are pinned here so every writer and reader agrees on them:

* ``nodeId`` is ``model@<stepKey>`` for a MODEL node and ``tool@<stepKey>|<callKey>`` for a
  TOOL node, where ``stepKey`` is ``<runId>|<turnId>|<step>`` (a missing turnId or step is
  the empty string) and ``callKey`` is the tool call's ``callId``, else its ``toolName``, else
  ``anon`` — exactly the seed's pairing keys, prefixed.
* ``recordId`` is a UUIDv5 of tenant, nodeId and the IDs of the events that formed the node,
  in stream order. Reprocessing the same events after a crash therefore writes the same
  record, and readers de-duplicate by it.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from runtrail.events.jsonform import tight
from runtrail.nodes.keys import call_key as call_key  # the one pairing-key function

NodeType = Literal["MODEL", "TOOL"]
NODE_TYPES: tuple[NodeType, ...] = ("MODEL", "TOOL")

#: Namespace of record IDs; changing it would change every record ID ever written.
RECORD_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "runtrail:capture:node-io-record")

#: Any JSON value (a prompt, a raw provider payload, a tool call or result), kept as it was.
JsonValue = Annotated[Any, "runtrail.json"]


def step_key(run_id: str, turn_id: str | None, step: int | None) -> str:
    """``<runId>|<turnId>|<step>``, the MODEL pairing key (missing parts are empty)."""
    return f"{run_id}|{'' if turn_id is None else turn_id}|{'' if step is None else step}"


def model_node_id(run_id: str, turn_id: str | None, step: int | None) -> str:
    """``model@<runId>|<turnId>|<step>``."""
    return "model@" + step_key(run_id, turn_id, step)


def tool_node_id(run_id: str, turn_id: str | None, step: int | None, key: str) -> str:
    """``tool@<runId>|<turnId>|<step>|<callKey>``."""
    return f"tool@{step_key(run_id, turn_id, step)}|{key}"


_NAMESPACE_BYTES = RECORD_NAMESPACE.bytes


def derive_record_id(tenant_id: str, node_id: str, event_ids: Iterable[str]) -> str:
    """Deterministic record ID: UUIDv5 over tenant, nodeId and source event IDs.

    The RFC 4122 steps written out (SHA-1 of namespace and name, version and variant bits,
    hex groups): the same string as ``str(uuid.uuid5(...))`` without building UUID objects,
    which cost more than the hash on capture's hot path."""
    name = "\n".join((tenant_id, node_id, *event_ids))
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class NodeIoRecord(BaseModel):
    """One captured node: locators, input, accumulated output, timing and MODEL enrichment."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    record_id: str
    tenant_id: str
    run_id: str
    session_id: str | None = None
    turn_id: str | None = None
    step: int | None = None
    node_type: NodeType
    node_id: str
    model_id: str | None = None
    #: MODEL: the prompt as published; TOOL: the call ``{callId, toolName, arguments}``;
    #: ``None`` when the node's input event was never seen (an orphan result).
    inputs: JsonValue = None
    output_text: str = ""
    #: MODEL: the latest non-empty raw payload; TOOL: the result
    #: ``{callId, toolName, output, error}``.
    outputs: JsonValue = None
    started_at_epoch_ms: int
    captured_at_epoch_ms: int
    duration_ms: int = Field(ge=0)
    reasoning_text: str = ""
    retry_count: int = Field(default=0, ge=0)
    input_tokens: int | None = None
    output_tokens: int | None = None
    source_event_ids: tuple[str, ...] = ()
    #: True when the record may not hold the node whole: flushed by idle expiry before its
    #: closing event arrived, or a sequence gap in its run did not fill in within the window.
    incomplete: bool = False
    #: Why it is incomplete: ``idle`` or ``sequence-gap`` (None when complete).
    incomplete_reason: str | None = None

    def to_json_line(self) -> bytes:
        """The record's JSON form as one JSONL line, newline included.

        Written by orjson from the field values (the same bytes as pydantic's
        ``model_dump_json``: compact, UTF-8, fields in declaration order; a test holds the
        two equal); a value orjson refuses (an integer beyond 64 bits) falls back to pydantic.
        :func:`~runtrail.events.jsonform.tight`, as it is kept until the sink writes it."""
        values = self.__dict__
        try:
            line = orjson.dumps(
                {alias: values[name] for name, alias in _ALIASES}, option=orjson.OPT_APPEND_NEWLINE
            )
            return tight(line)  # it waits in the sink's buffer
        except TypeError:
            return self.model_dump_json(by_alias=True).encode() + b"\n"

    @classmethod
    def trusted(cls, **values: Any) -> NodeIoRecord:
        """A record from values already of the right types (the pairer's own, built from
        validated events), without validation: every field must be given. Capture's hot path
        builds one per node, where validating them again was most of the record's cost."""
        if len(values) != len(_ALIASES):
            missing = sorted({name for name, _ in _ALIASES} - set(values))
            raise TypeError(f"a trusted record needs every field; missing {missing}")
        record = object.__new__(cls)
        object.__setattr__(record, "__dict__", values)
        object.__setattr__(record, "__pydantic_fields_set__", set(values))
        object.__setattr__(record, "__pydantic_extra__", None)
        object.__setattr__(record, "__pydantic_private__", None)
        return record

    @classmethod
    def from_json(cls, data: str | bytes) -> NodeIoRecord:
        """Parse one JSON-form record (as written by :meth:`to_json_line`)."""
        return cls.model_validate_json(data)


#: (field name, JSON name) in declaration order: the order of the JSON form's keys
_ALIASES: tuple[tuple[str, str], ...] = tuple(
    (name, info.alias or name) for name, info in NodeIoRecord.model_fields.items()
)
