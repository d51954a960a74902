"""Avro schemas: generated from the payload models, committed under ``schemas/``, loaded by fingerprint.

Each (event type, version) has one top-level record ``runtrail.events.<Name>V<n>`` holding the
envelope fields and a typed ``data`` record, so the writer schema's fingerprint alone tells a
consumer the type and version. Fields typed ``JsonValue`` are Avro strings holding JSON text,
marked ``"runtrail.json": true`` (fingerprints ignore such attributes).

The committed ``.avsc`` files are the contract: a test regenerates them and fails on any
difference, so a retained version can never change under its readers.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
from fastavro import parse_schema
from fastavro.schema import fingerprint, to_parsing_canonical_form

from runtrail.events.models import DATA_MODELS, EventData

JSON_MARK = "runtrail.json"
NAMESPACE = "runtrail.events"

_PRIMITIVES: dict[Any, str] = {str: "string", int: "long", float: "double", bool: "boolean"}


def _avro_type(annotation: Any) -> tuple[Any, bool]:
    """Avro type of a Python annotation, and whether it holds JSON text."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) != 1:
            raise TypeError(f"unsupported union {annotation!r}")
        inner, is_json = _avro_type(non_null[0])
        if isinstance(inner, list):
            return inner, is_json
        return ["null", inner], is_json
    if origin is typing.Literal:
        return "string", False
    if origin is list:
        inner, is_json = _avro_type(args[0])
        if is_json:
            raise TypeError("JsonValue inside a list is not supported; use a JsonValue field")
        return {"type": "array", "items": inner}, False
    if annotation in _PRIMITIVES:
        return _PRIMITIVES[annotation], False
    raise TypeError(f"no Avro mapping for {annotation!r}")


def _record_name(model: type[EventData]) -> str:
    base = "".join(part.capitalize() for part in model.event_type.replace(".", "_").split("_"))
    return f"{base}V{model.version}"


def _data_record(model: type[EventData]) -> dict[str, Any]:
    fields: list[dict[str, Any]] = []
    for name, info in model.model_fields.items():
        if JSON_MARK in info.metadata:  # JsonValue: any JSON, carried as JSON text
            avro_type, is_json = ["null", "string"], True
        else:
            avro_type, is_json = _avro_type(info.annotation)
        field: dict[str, Any] = {"name": info.alias or name, "type": avro_type}
        if isinstance(avro_type, list) and avro_type[0] == "null":
            field["default"] = None
        if is_json:
            field[JSON_MARK] = True
        fields.append(field)
    doc = (model.__doc__ or "").strip().splitlines()
    record: dict[str, Any] = {
        "type": "record",
        "name": f"{_record_name(model)}Data",
        "fields": fields,
    }
    if doc:
        record["doc"] = doc[0]
    return record


def _optional(name: str, avro_type: str) -> dict[str, Any]:
    return {"name": name, "type": ["null", avro_type], "default": None}


def build_schema(model: type[EventData]) -> dict[str, Any]:
    """The full Avro schema of one event type and version (envelope + payload)."""
    return {
        "type": "record",
        "name": _record_name(model),
        "namespace": NAMESPACE,
        "doc": f"{model.event_type} v{model.version}",
        "fields": [
            {"name": "eventId", "type": "string"},
            {"name": "runId", "type": "string"},
            {"name": "tenantId", "type": "string"},
            {"name": "sequence", "type": "long"},
            {"name": "type", "type": "string"},
            {"name": "schemaVersion", "type": "int"},
            {"name": "occurredAt", "type": "string"},
            _optional("recordedAt", "string"),
            {
                "name": "actor",
                "type": {
                    "type": "record",
                    "name": f"{_record_name(model)}Actor",
                    "fields": [
                        {"name": "kind", "type": "string"},
                        {"name": "id", "type": "string"},
                    ],
                },
            },
            _optional("causationEventId", "string"),
            {"name": "correlationId", "type": "string"},
            _optional("sessionId", "string"),
            _optional("turnId", "string"),
            _optional("step", "long"),
            {"name": "data", "type": _data_record(model)},
        ],
    }


def schema_file_name(event_type: str, version: int) -> str:
    return f"{event_type}.v{version}.avsc"


def generated_schemas() -> dict[str, dict[str, Any]]:
    """File name -> schema, for every registered (type, version)."""
    return {
        schema_file_name(t, v): build_schema(model) for (t, v), model in sorted(DATA_MODELS.items())
    }


def render(schema: dict[str, Any]) -> bytes:
    """How a schema is written to disk (stable, reviewable)."""
    return orjson.dumps(schema, option=orjson.OPT_INDENT_2) + b"\n"


@dataclass(frozen=True)
class WriterSchema:
    """A retained writer schema, ready to decode with."""

    event_type: str
    version: int
    fingerprint: bytes  # 8 bytes, little-endian CRC-64-AVRO, as in the single-object header
    parsed: Any  # fastavro's parsed schema
    json_fields: tuple[str, ...]  # data fields that carry JSON text
    source: dict[str, Any]
    #: data fields whose value may be nested or a float: the only ones the depth and
    #: non-finite walk of consumed events has to visit (the rest are Avro-typed scalars)
    walked_fields: tuple[str, ...] = ()
    #: the walked fields that are not JSON text (doubles, arrays, maps of the schema)
    walked_typed_fields: tuple[str, ...] = ()


#: Avro types whose values are scalars that can be neither nested nor non-finite
_FLAT_SCALARS = frozenset({"null", "boolean", "int", "long", "string", "bytes", "enum", "fixed"})


def _flat_scalar(avro_type: Any) -> bool:
    """Whether every value of ``avro_type`` is a scalar that no depth or number limit can
    refuse (a union of such; not a record, array, map, float or double, nor a named
    reference, which could be any of those)."""
    if isinstance(avro_type, list):
        return all(_flat_scalar(t) for t in avro_type)
    if isinstance(avro_type, dict):
        return avro_type.get("type") in ("enum", "fixed") or (
            avro_type.get("type") in _FLAT_SCALARS and "logicalType" not in avro_type
        )
    return avro_type in _FLAT_SCALARS and avro_type not in ("enum", "fixed")


def _writer_schema(schema: dict[str, Any]) -> WriterSchema:
    data_fields = next(f for f in schema["fields"] if f["name"] == "data")["type"]["fields"]
    event_type, version = schema["doc"].rsplit(" v", 1)
    return WriterSchema(
        event_type=event_type,
        version=int(version),
        fingerprint=bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO")),
        parsed=parse_schema(schema),
        json_fields=tuple(f["name"] for f in data_fields if f.get(JSON_MARK)),
        source=schema,
        walked_fields=tuple(
            f["name"] for f in data_fields if f.get(JSON_MARK) or not _flat_scalar(f["type"])
        ),
        walked_typed_fields=tuple(
            f["name"] for f in data_fields if not f.get(JSON_MARK) and not _flat_scalar(f["type"])
        ),
    )


def schemas_dir() -> Path:
    """Where the committed ``.avsc`` files are (package data ``runtrail_schemas``)."""
    return Path(str(resources.files("runtrail_schemas")))


def load_schema_dir(directory: Path) -> tuple[WriterSchema, ...]:
    """Every ``.avsc`` in ``directory``, parsed."""
    return tuple(
        _writer_schema(orjson.loads(f.read_bytes())) for f in sorted(directory.glob("*.avsc"))
    )


@cache
def retained_schemas() -> tuple[WriterSchema, ...]:
    """Every committed schema (all retained versions), parsed."""
    schemas = load_schema_dir(schemas_dir())
    if not schemas:
        raise RuntimeError(f"no Avro schemas found in {schemas_dir()}")
    return schemas
