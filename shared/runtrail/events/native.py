"""The compiled consume path (``runtrail_native``), and the plans it runs.

``runtrail_native`` is an optional Rust extension (``shared/runtrail_native``, built with
maturin: ``pip install ./shared/runtrail_native``). It holds interpreters, each given a plan
made here once per schema:

- :func:`avro_reader`: an Avro body read into the record :mod:`~runtrail.events.avro_fast`'s
  generated decoder returns, from a plan of the fastavro-parsed writer schema, and
  :func:`avro_writer`: a record encoded as its generated encoder encodes it, from the same plan;
- :func:`model_builder`: a pydantic model instance built from a JSON-form dict the way its
  validator builds it, from a plan of the model's core schema, and :func:`json_dumper`: the
  JSON form of an instance as pydantic's serializer makes it, from a plan of the same schema.

All only accept. On anything they are not sure of they return None and the caller runs the
Python path, whose value or error is the answer, exactly as before. A plan is made only from
what it covers completely: a core schema with a validator function, a config option or a
constraint the plan does not know gets no builder at all (pydantic validates that class as
ever). ``tests/test_native.py`` holds each to the Python path on every fixture and on random
records and forms of every schema, valid and not.

``RUNTRAIL_NATIVE``: ``auto`` (the default) uses the extension when it is installed, ``off``
never does, ``required`` refuses to start without it (CI sets it, so the suite never passes
on the slower path by accident).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any, Protocol, cast

#: the environment variable that chooses (see the module doc)
ENV = "RUNTRAIL_NATIVE"
_MODES = ("auto", "off", "required")


class NativeUnavailable(ImportError):
    """``RUNTRAIL_NATIVE=required`` and the extension cannot be imported."""


def load(mode: str | None = None) -> ModuleType | None:
    """The extension module, or None (``off``, or ``auto`` without it installed)."""
    mode = (mode if mode is not None else os.environ.get(ENV, "auto")).strip().lower() or "auto"
    if mode not in _MODES:
        raise ValueError(f"{ENV}={mode!r}: expected one of {', '.join(_MODES)}")
    if mode == "off":
        return None
    try:
        module = importlib.import_module("runtrail_native")
        if getattr(module, "__file__", None) is None:
            # an editable install puts shared/ on sys.path, where the crate's source folder
            # imports as an empty namespace package: that is not the built extension
            raise ImportError("runtrail_native is not built (only its source folder is found)")
    except ImportError as exc:
        if mode == "required":
            raise NativeUnavailable(
                f"{ENV}=required but runtrail_native cannot be imported ({exc}): build it with "
                "`pip install ./shared/runtrail_native` (needs Rust), or set "
                f"{ENV}=auto to run without it"
            ) from exc
        return None
    return module


NATIVE: ModuleType | None = load()


class Unplanned(Exception):
    """The schema uses something the native plans do not cover."""


# --- Avro ------------------------------------------------------------------------------------
_AVRO_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "double", "string"})


def avro_program(parsed: Any) -> tuple[Any, ...]:
    """The reader plan of a fastavro-parsed schema; :class:`Unplanned` if it has a type the
    reader does not read (float, bytes, enum, fixed, array, map, logical types, recursion)."""
    named: dict[str, Any] = {}

    def node(s: Any, stack: tuple[str, ...]) -> tuple[Any, ...]:
        if isinstance(s, str):
            if s in _AVRO_PRIMITIVES:
                return (s,)
            if s in named:
                return node(named[s], stack)
            raise Unplanned(f"type {s}")
        if isinstance(s, list):
            return ("union", tuple(node(b, stack) for b in s))
        if not isinstance(s, dict) or "logicalType" in s:
            raise Unplanned(f"schema {s!r:.60}")
        kind = s["type"]
        if kind in _AVRO_PRIMITIVES:
            return (kind,)
        if kind != "record":
            raise Unplanned(f"type {kind}")
        name = s["name"]
        if name in stack:
            raise Unplanned(f"recursive record {name}")
        named[name] = s
        return (
            "record",
            tuple((f["name"], node(f["type"], (*stack, name))) for f in s["fields"]),
        )

    return node(parsed, ())


def avro_reader(parsed: Any) -> Any | None:
    """The native reader of a writer schema (``read(value, pos) -> (record, end) | None``),
    or None without the extension or for a schema it does not read."""
    return _planned_avro("AvroReader", parsed)


def avro_writer(parsed: Any) -> Any | None:
    """The native writer of a schema (``write(record, prefix) -> bytes | None``), from the
    reader's plan of it, or None without the extension or for a schema it does not read."""
    return _planned_avro("AvroWriter", parsed)


def _planned_avro(kind: str, parsed: Any) -> Any | None:
    """``kind`` planned for ``parsed``; None also from an extension built before ``kind``
    (the Python path then answers, as without one)."""
    make = getattr(NATIVE, kind, None)
    if make is None:
        return None
    try:
        return make(avro_program(parsed))
    except Unplanned:
        return None


# --- pydantic models -------------------------------------------------------------------------
#: keys of a core schema that change nothing the builder must reproduce
_IGNORED = frozenset({"type", "metadata", "serialization", "ref"})
_CONSTRAINTS: dict[str, frozenset[str]] = {
    "str": frozenset({"min_length", "max_length", "pattern"}),
    "int": frozenset({"ge", "gt", "le", "lt"}),
    "float": frozenset({"ge", "gt", "le", "lt"}),
    "bool": frozenset(),
    "any": frozenset(),
    "literal": frozenset({"expected"}),
    "nullable": frozenset({"schema"}),
}
#: model config the builder reproduces; any other key (``str_max_length``, ``strict``,
#: ``regex_engine``…) reaches the validators, so such a model keeps pydantic
_CONFIG = frozenset({"extra_fields_behavior", "title", "validate_by_alias", "validate_by_name"})
_MODEL = frozenset(
    {"type", "cls", "config", "custom_init", "metadata", "ref", "root_model", "schema"}
)
_FIELDS = frozenset({"type", "fields", "model_name", "computed_fields"})
_FIELD = frozenset({"type", "schema", "validation_alias", "serialization_alias", "metadata"})


def _only(schema: dict[str, Any], allowed: frozenset[str], what: str) -> None:
    extra = set(schema) - allowed - _IGNORED
    if extra:
        raise Unplanned(f"{what}: {sorted(extra)}")


def _check(schema: dict[str, Any]) -> tuple[Any, ...]:
    kind = schema["type"]
    if kind == "model":
        return _model(schema)
    if kind == "function-after":
        _only(schema, frozenset({"function", "schema"}), kind)
        return ("after", _no_info(schema["function"]), _check(schema["schema"]))
    allowed = _CONSTRAINTS.get(kind)
    if allowed is None:
        raise Unplanned(f"core schema {kind}")
    _only(schema, allowed, kind)
    if kind == "str":
        return ("str", schema.get("min_length"), schema.get("max_length"), schema.get("pattern"))
    if kind in ("int", "float"):
        bounds = [schema.get(k) for k in ("ge", "gt", "le", "lt")]
        if kind == "float":  # an int bound compares as the float it equals, when it is one
            bounds = [float(b) if type(b) is int and abs(b) < 2**53 else b for b in bounds]
        cast = int if kind == "int" else float
        if any(b is not None and type(b) is not cast for b in bounds):
            raise Unplanned(f"{kind} bound of another type")
        return (kind, *bounds)
    if kind == "literal":
        expected = tuple(schema["expected"])
        if not all(type(v) in (str, int) for v in expected):
            raise Unplanned("literal of other than str or int")
        return ("literal", expected)
    if kind == "nullable":
        return ("nullable", _check(schema["schema"]))
    return (kind,)


def _lookup_keys(name: str, field: dict[str, Any], config: dict[str, Any]) -> tuple[str, ...]:
    alias = field.get("validation_alias")
    aliases: list[str] = []
    if isinstance(alias, str):
        aliases = [alias]
    elif isinstance(alias, list):
        for path in alias:  # AliasChoices: a list of paths; only one-key paths are planned
            if not (isinstance(path, list) and len(path) == 1 and isinstance(path[0], str)):
                raise Unplanned(f"alias path {path!r}")
            aliases.append(path[0])
    elif alias is not None:
        raise Unplanned(f"alias {alias!r}")
    keys: list[str] = []
    if config.get("validate_by_alias", True):
        keys.extend(aliases)
    if config.get("validate_by_name", False) or not aliases:
        keys.append(name)
    return tuple(dict.fromkeys(keys))


def _model(schema: dict[str, Any]) -> tuple[Any, ...]:
    _only(schema, _MODEL, "model")
    config = schema.get("config", {})
    _only(config, _CONFIG, "model config")
    if schema.get("custom_init") or schema.get("root_model"):
        raise Unplanned("custom __init__ or root model")
    if config.get("extra_fields_behavior", "ignore") not in ("forbid", "ignore"):
        raise Unplanned("extra fields allowed")
    inner = schema["schema"]
    before = None
    if inner["type"] == "function-before":  # a mode="before" model validator
        _only(inner, frozenset({"function", "schema"}), "function-before")
        before, inner = _no_info(inner["function"]), inner["schema"]
    if inner["type"] != "model-fields":
        raise Unplanned(f"model of {inner['type']}")
    _only(inner, _FIELDS, "model-fields")
    fields = []
    for name, field in inner["fields"].items():
        if field["type"] != "model-field":
            raise Unplanned(f"field {name}: {field['type']}")
        _only(field, _FIELD, f"field {name}")
        value = field["schema"]
        required, default = True, None
        if value["type"] == "default":
            _only(value, frozenset({"schema", "default"}), f"default of {name}")
            default = value["default"]
            if default is not None and type(default) not in (str, int, float, bool):
                raise Unplanned(f"field {name}: a mutable default")
            required, value = False, value["schema"]
        fields.append((name, _lookup_keys(name, field, config), required, default, _check(value)))
    return ("model", schema["cls"], tuple(fields), before)


def _no_info(function: dict[str, Any]) -> Any:
    """A validator function called with the value alone (pydantic's ``no-info``). The builder
    calls it as pydantic would; it must be pure (ours are), since on an error pydantic runs it
    once more to report it."""
    if function.get("type") != "no-info" or set(function) - {"type", "function"}:
        raise Unplanned(f"validator function {function.get('type')}")
    return function["function"]


def core_schema(cls: type[Any]) -> dict[str, Any]:
    """The class's core schema as a plain dict (pydantic builds some of them lazily)."""
    schema = cls.__pydantic_core_schema__
    if not isinstance(schema, dict):
        cls.model_rebuild(force=True)
        schema = cls.__pydantic_core_schema__
    if not isinstance(schema, dict):
        raise Unplanned(f"{cls.__name__} has no core schema")
    return schema


def model_plan(cls: type[Any]) -> tuple[Any, ...]:
    """The builder plan of a pydantic model class; :class:`Unplanned` when its core schema
    holds anything the builder does not reproduce exactly."""
    schema = core_schema(cls)
    if schema.get("type") != "model" or schema.get("cls") is not cls:
        raise Unplanned(f"{cls.__name__}: core schema {schema.get('type')}")
    return _model(schema)


def int_paths(plan: tuple[Any, ...]) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """Where a model plan has an int field: each path as the key spellings of every step.
    The builder reads a canonical decimal string there as its number (pydantic's lax int),
    where a strict validation refuses it."""
    paths: list[tuple[tuple[str, ...], ...]] = []

    def walk(node: tuple[Any, ...], path: tuple[tuple[str, ...], ...]) -> None:
        kind = node[0]
        if kind == "int":
            paths.append(path)
        elif kind == "nullable":
            walk(node[1], path)
        elif kind == "after":
            walk(node[2], path)
        elif kind == "model":
            for field in node[2]:
                walk(field[4], (*path, field[1]))

    walk(plan, ())
    return tuple(paths)


def model_builder(cls: type[Any]) -> Any | None:
    """The native builder of a model class (``build(form) -> instance | None``), or None
    without the extension or for a class whose core schema it does not reproduce."""
    if NATIVE is None:
        return None
    try:
        return NATIVE.ModelBuilder(model_plan(cls))
    except Unplanned:
        return None


def event_decoder(schemas: Any, loads: Any) -> Any | None:
    """The native event decoder over the writer schemas whose reader and builder plans exist
    (``decode(value, recorded_at, depth_limit) -> (event, written, to_walk) | None`` and
    ``decode_event(...) -> (event, to_walk) | None``), or None without the extension.
    ``schemas``: (writer schema, current event class, upcast function, the upcasters'
    function of ``data``, current version) per schema, both functions None for the current
    version."""
    if NATIVE is None:
        return None
    entries = []
    for schema, cls, lift, lift_data, current in schemas:
        try:
            program, plan = avro_program(schema.parsed), model_plan(cls)
        except Unplanned:
            continue
        entries.append(
            (
                schema.fingerprint,
                program,
                schema.event_type,
                schema.version,
                tuple(schema.json_fields),
                tuple(schema.walked_typed_fields),
                tuple(schema.walked_fields),
                plan,
                lift,
                lift_data,
                current,
            )
        )
    return NATIVE.EventDecoder(entries, loads)


# --- the JSON form of a model, without pydantic's serializer -----------------------------


class CompiledDumper(Protocol):
    """The extension's ``JsonDumper`` of one class (see :func:`json_dumper`)."""

    def __call__(self, instance: Any, /) -> dict[str, Any] | None: ...

    def canonical(self, instance: Any, /) -> bytes | None: ...


#: the tags of a dump plan's nodes (``runtrail_native``'s ``JsonDumper`` reads them)
_D_MODEL, _D_NULLABLE, _D_ANY, _D_STR, _D_INT, _D_BOOL, _D_FLOAT, _D_LITERAL, _D_SER = range(9)
_D_SCALARS = {"str": _D_STR, "int": _D_INT, "bool": _D_BOOL, "float": _D_FLOAT}

_SERIALIZER = frozenset(
    {"type", "function", "is_field_serializer", "info_arg", "return_schema", "when_used"}
)


def _dump_model(schema: dict[str, Any], building: frozenset[type[Any]]) -> tuple[Any, ...]:
    """The dump plan of a model schema: (tag, class, ((attribute, alias, plan), ...))."""
    cls = schema["cls"]
    if cls in building:
        raise Unplanned(f"{cls.__name__} contains itself")
    _only(schema, _MODEL, "model (dump)")
    if schema.get("custom_init") or schema.get("root_model"):
        raise Unplanned("custom __init__ or root model")
    config = schema.get("config", {})
    _only(config, _CONFIG, "model config (dump)")
    inner = schema["schema"]
    if inner["type"] == "function-before":  # a model validator: dumping does not run it
        _only(inner, frozenset({"function", "schema"}), "function-before")
        inner = inner["schema"]
    if inner["type"] != "model-fields":
        raise Unplanned(f"model of {inner['type']}")
    _only(inner, _FIELDS, "model-fields")
    if inner.get("computed_fields"):
        raise Unplanned("computed fields")
    fields = []
    for name, field in inner["fields"].items():
        if field["type"] != "model-field":
            raise Unplanned(f"field {name}: {field['type']}")
        _only(field, _FIELD, f"field {name}")
        alias = field.get("serialization_alias") or name
        fields.append((name, alias, _dump_value(field["schema"], building | {cls})))
    return (_D_MODEL, cls, tuple(fields))


def _dump_value(schema: dict[str, Any], building: frozenset[type[Any]]) -> tuple[Any, ...]:
    """The dump plan of one value's schema, or :class:`Unplanned`."""
    kind = schema["type"]
    serialization = schema.get("serialization")
    if serialization is not None:
        _only(serialization, _SERIALIZER, "serializer")
        plain = serialization.get("type") == "function-plain"
        if (
            not plain
            or serialization.get("info_arg")
            or serialization.get("when_used", "always") != "always"
        ):
            raise Unplanned(f"serializer {serialization.get('type')}")
        if serialization.get("return_schema") != {"type": "str"}:
            raise Unplanned("serializer returning other than str")
        field = bool(serialization.get("is_field_serializer"))
        return (_D_SER, serialization["function"], field)
    if kind in ("default", "function-after", "function-before"):
        _only(schema, frozenset({"schema", "default", "function"}), kind)
        return _dump_value(schema["schema"], building)
    if kind == "nullable":
        _only(schema, frozenset({"schema"}), kind)
        return (_D_NULLABLE, _dump_value(schema["schema"], building))
    if kind == "model":
        return _dump_model(schema, building)
    if kind == "any":
        _only(schema, frozenset(), kind)
        return (_D_ANY,)
    allowed = _CONSTRAINTS.get(kind)
    if allowed is None or kind not in ("str", "int", "bool", "float", "literal"):
        raise Unplanned(f"core schema {kind} (dump)")
    _only(schema, allowed, kind)
    if kind == "literal":
        types = {type(v).__name__ for v in schema["expected"]}
        if not types <= {"str", "int"}:
            raise Unplanned("literal of other than str or int")
        return (_D_LITERAL, "str" in types, "int" in types)
    return (_D_SCALARS[kind],)


def json_dumper(cls: type[Any]) -> CompiledDumper | None:
    """A callable giving ``cls(...).model_dump(mode="json", by_alias=True)`` without
    pydantic's serializer, or None without the extension or for a class whose core schema it
    does not reproduce. The function answers None on a value its plan does not cover (a
    subclass, a missing field, a value of another type): dump that one with pydantic. The
    extension's ``JsonDumper`` runs the plan (the fields typed ``Any`` copied by its
    ``json_copy``); reading the attributes in Python cost a microsecond or more an event.
    Its ``canonical`` (absent from an extension built before it) writes the RFC 8785 bytes
    of that form from the same plan, or answers None for the caller to canonicalise it."""
    dumper = getattr(NATIVE, "JsonDumper", None)  # None: no extension, or one built before it
    if dumper is None:
        return None
    try:
        schema = core_schema(cls)
        if schema.get("type") == "function-after":  # a model validator: dumping does not run it
            _only(schema, frozenset({"function", "schema", "ref", "metadata"}), "function-after")
            schema = schema["schema"]
        if schema.get("type") != "model" or schema.get("cls") is not cls:
            raise Unplanned(f"{cls.__name__}: core schema {schema.get('type')}")
        plan = _dump_model(schema, frozenset())
    except Unplanned:
        return None
    return cast(CompiledDumper, dumper(plan))
