"""Event wire format: Avro single-object encoding, decoded by the writer schema's fingerprint.

A value is ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema +
the Avro binary body. The fingerprint selects the writer schema among all retained versions, so
no schema server is needed; the record is then upcast to the current version and validated.
The body is read and written by the per-schema generated code of :mod:`avro_fast`, exact with
fastavro (which it runs itself on anything it is not sure of).

Decoding keeps the *written* JSON form (writer version, before upcasting) beside the current
event: it is what the audit chain hashes, so history hashes never change when code changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, cast

import orjson
from pydantic import ValidationError

from runtrail.events import avro_fast, avro_schemas, native
from runtrail.events.errors import (
    EventError,
    InvalidEvent,
    UndecodableEvent,
    UnknownEventType,
    UnknownSchema,
)
from runtrail.events.jsonform import canonical_bytes
from runtrail.events.models import CURRENT_VERSIONS, EVENT_CLASSES, Event
from runtrail.events.upcasting import check_chains, data_lift, upcast

MAGIC = b"\xc3\x01"
HEADER_LEN = 10

JsonDict = dict[str, Any]


def header_problem(value: bytes | None) -> str:
    """Why ``value`` has no valid single-object header, in words an operator can act on: a
    truncated value (e.g. ``C3 01`` alone) is not the same fault as bytes of another format."""
    if value is None:
        return "no value (a null message, e.g. a tombstone): not an event"
    if not value:
        return "truncated: empty value (0 bytes), not an event"
    if len(value) < HEADER_LEN and MAGIC.startswith(value[:2]):
        return (
            f"truncated: {len(value)} byte(s), shorter than the {HEADER_LEN}-byte header "
            f"(C3 01 marker + 8-byte schema fingerprint)"
        )
    return (
        f"not Avro single-object encoding: no C3 01 marker (starts with {value[:2].hex(' ')}, "
        f"{len(value)} bytes)"
    )


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded event: the validated current form and the JSON form as it was written.

    ``to_walk`` names the ``data`` fields the consumer's depth and non-finite walk must still
    visit (:meth:`EventCodec.decode` with a ``depth_limit``)."""

    event: Event
    written: JsonDict
    to_walk: tuple[str, ...] = ()


_FAST: dict[bytes, avro_fast.FastCodec] = {}


def _fast_codec(schema: avro_schemas.WriterSchema) -> avro_fast.FastCodec:
    """The generated codec of a writer schema, made once per process and fingerprint."""
    codec = _FAST.get(schema.fingerprint)
    if codec is None:
        codec = _FAST[schema.fingerprint] = avro_fast.codec_for(schema.parsed)
    return codec


def _dump_json_fields(data: JsonDict, fields: tuple[str, ...]) -> JsonDict:
    if not fields:
        return data
    out = dict(data)
    for name in fields:
        value = out.get(name)
        if value is not None:
            out[name] = orjson.dumps(value).decode()
    return out


class EventCodec:
    """Encodes current events and decodes every retained version."""

    def __init__(self, extra_schema_dirs: Sequence[Path] = ()) -> None:
        """``extra_schema_dirs`` add writer schemas this code has no model for (say, a newer
        writer's): their events then decode and are dead-lettered as an unknown type or
        version with a precise reason, instead of as unreadable bytes."""
        check_chains()
        schemas = list(avro_schemas.retained_schemas())
        for directory in extra_schema_dirs:
            schemas.extend(avro_schemas.load_schema_dir(Path(directory)))
        self._by_fp = {s.fingerprint: s for s in schemas}
        self._by_tv = {(s.event_type, s.version): s for s in schemas}
        self._fast = {s.fingerprint: _fast_codec(s) for s in schemas}
        decoder = native.event_decoder(
            [
                (
                    s,
                    EVENT_CLASSES[(s.event_type, CURRENT_VERSIONS[s.event_type])],
                    None if CURRENT_VERSIONS[s.event_type] == s.version else upcast,
                    None
                    if CURRENT_VERSIONS[s.event_type] == s.version
                    else data_lift(s.event_type, s.version),
                    CURRENT_VERSIONS[s.event_type],
                )
                for s in self._by_fp.values()
                if (s.event_type, s.version) in EVENT_CLASSES
            ],
            orjson.loads,
        )
        #: the compiled decode_parts (None without runtrail_native):
        #: ``(value, recorded_at, depth_limit) -> (event, written, to_walk) | None``
        self.decode_native: (
            Callable[
                [bytes | None, str | None, int | None],
                tuple[Event, JsonDict, tuple[str, ...]] | None,
            ]
            | None
        ) = decoder.decode if decoder is not None else None
        #: the same without the written form (the event read straight from the bytes, an old
        #: version's data lifted by the upcasters): ``-> (event, to_walk) | None``; None also
        #: when a JSON-text field is deep enough to walk (the walk reads the written form)
        self.decode_event: (
            Callable[[bytes | None, str | None, int | None], tuple[Event, tuple[str, ...]] | None]
            | None
        ) = decoder.decode_event if decoder is not None else None
        #: the RFC 8785 bytes of the written form straight from a body (None without
        #: runtrail_native, or from one built before it): ``value -> bytes | None``, see
        #: :meth:`written_canonical`
        self.written_canonical_native: Callable[[bytes], bytes | None] | None = getattr(
            decoder, "written_canonical", None
        )
        #: ``decode_event`` over a run of consumed messages, sequence checks included (see
        #: ``BatchDecoder.decode_batch``); None without runtrail_native
        self.decode_run: Callable[..., tuple[int, tuple[Event, Any] | None]] | None = (
            decoder.decode_run if decoder is not None else None
        )

    # --- encoding ------------------------------------------------------------------------
    def encode(self, event: Event) -> bytes:
        """Single-object encoding of ``event`` with the schema of its own type and version."""
        return self.encode_json_form(event.json_form())

    def encode_json_form(self, form: JsonDict) -> bytes:
        """Encode a (validated) JSON-form event; strict, so no field is silently dropped."""
        key = (form.get("type"), form.get("schemaVersion"))
        schema = self._by_tv.get(key)  # type: ignore[arg-type]
        if schema is None:
            raise UnknownEventType(f"no schema for event type {key[0]!r} v{key[1]}")
        record = dict(form)
        record["sequence"] = int(record["sequence"])
        record["data"] = _dump_json_fields(record["data"], schema.json_fields)
        try:
            return self._fast[schema.fingerprint].encode(record, MAGIC + schema.fingerprint)
        except (ValueError, TypeError) as exc:
            raise InvalidEvent(f"does not fit {key[0]} v{key[1]}: {exc}") from exc

    def encode_exact(self, record: JsonDict) -> bytes | None:
        """Encode the record :func:`validate_exact` returned (``sequence`` an int); None
        when a JSON-valued field holds anything but plain JSON types (then encode the
        validated event's :meth:`~Event.json_form`, which converts such values)."""
        schema = self._by_tv.get((record["type"], record["schemaVersion"]))
        if schema is None:
            return None
        if schema.json_fields:
            data = dict(record["data"])
            try:
                for name in schema.json_fields:
                    value = data[name]
                    if value is not None:
                        data[name] = orjson.dumps(value, option=_PLAIN_JSON).decode()
            except TypeError:  # a datetime, a str subclass, a non-str key…: json_form decides
                return None
            record = {**record, "data": data}
        try:
            return self._fast[schema.fingerprint].encode(record, MAGIC + schema.fingerprint)
        except (ValueError, TypeError, KeyError):
            return None

    # --- decoding ------------------------------------------------------------------------
    def decode_written(self, value: bytes | None) -> JsonDict:
        """The JSON form exactly as written (writer version), without upcasting or validation."""
        return self._decode_written(value, None)[0]

    def written_canonical(self, value: bytes | None) -> bytes:
        """The RFC 8785 bytes of the JSON form as written (what the audit chain hashes):
        written by the compiled path straight from the body when it is sure, else those of
        :meth:`decode_written`'s form, whose errors stand (:class:`InvalidEvent` also for a
        form with no canonical bytes, such as an integer beyond ±2^53)."""
        if self.written_canonical_native is not None and type(value) is bytes:
            made = self.written_canonical_native(value)
            if made is not None:
                return made
        return canonical_bytes(self.decode_written(value))

    def _decode_written(
        self, value: bytes | None, depth_limit: int | None
    ) -> tuple[JsonDict, tuple[str, ...]]:
        """The written JSON form, and the ``data`` fields a depth walk at ``depth_limit`` must
        visit: every field that may nest or hold a float, less the JSON-text fields whose text
        has fewer ``{``/``[`` than the limit (no chain of containers in them can be that
        deep, and orjson refuses NaN and Infinity in text). A plain count in C, where the
        walk is a Python step per container."""
        if value is None or len(value) < HEADER_LEN or value[:2] != MAGIC:
            raise UndecodableEvent(header_problem(value))
        schema = self._by_fp.get(value[2:HEADER_LEN])
        if schema is None:
            raise UnknownSchema(f"unknown writer schema fingerprint {value[2:HEADER_LEN].hex()}")
        try:
            decoded, end = self._fast[schema.fingerprint].decode(value, HEADER_LEN)
        except Exception as exc:  # fastavro raises assorted errors on corrupt bodies
            raise UndecodableEvent(f"corrupt Avro body for {schema.event_type}: {exc}") from exc
        record = cast(JsonDict, decoded)
        if end != len(value):
            raise UndecodableEvent(f"{len(value) - end} trailing bytes after the Avro body")
        if record["type"] != schema.event_type or record["schemaVersion"] != schema.version:
            raise InvalidEvent(
                f"record says {record['type']} v{record['schemaVersion']} but its schema is "
                f"{schema.event_type} v{schema.version}"
            )
        to_walk = schema.walked_fields if depth_limit is None else schema.walked_typed_fields
        if schema.json_fields:
            data: JsonDict = record["data"]
            for name in schema.json_fields:
                text = data.get(name)
                if text is not None:
                    if depth_limit is not None and (
                        text.count("{") + text.count("[") >= depth_limit
                    ):
                        to_walk = (*to_walk, name)
                    try:
                        data[name] = orjson.loads(text)
                    except orjson.JSONDecodeError as exc:
                        raise InvalidEvent(f"data.{name} is not JSON: {exc}") from exc
        record["sequence"] = str(record["sequence"])
        return record, to_walk

    def decode(
        self, value: bytes | None, recorded_at: str | None = None, *, depth_limit: int | None = None
    ) -> Decoded:
        """Decode, upcast to the current version and validate.

        ``recorded_at`` (the broker's log-append time) fills ``recordedAt`` of the current form
        when the writer left it empty; the written form is left exactly as written.
        ``depth_limit`` narrows :attr:`Decoded.to_walk` (see :meth:`_decode_written`).
        """
        return Decoded(*self.decode_parts(value, recorded_at, depth_limit))

    def decode_event_only(self, value: bytes | None, recorded_at: str | None = None) -> Event:
        """The current event alone, for a reader that never needs the written form (a replay):
        built straight from the bytes when the compiled path can, else :meth:`decode`'s."""
        if self.decode_event is not None:
            direct = self.decode_event(value, recorded_at, None)
            if direct is not None:
                return direct[0]
        return self.decode_parts(value, recorded_at, None)[0]

    def decode_parts(
        self, value: bytes | None, recorded_at: str | None, depth_limit: int | None
    ) -> tuple[Event, JsonDict, tuple[str, ...]]:
        """:meth:`decode` as a plain tuple (event, written, to_walk): the consumer's hot path
        takes it apart at once, so it is spared building a :class:`Decoded` per event."""
        if self.decode_native is not None:
            parts = self.decode_native(value, recorded_at, depth_limit)
            if parts is not None:
                return parts
        written, to_walk = self._decode_written(value, depth_limit)
        current = upcast(written)
        if recorded_at is not None and current.get("recordedAt") is None:
            current = {**current, "recordedAt": recorded_at}
        return validate_json_form(current), written, to_walk


class _StrictBuild(NamedTuple):
    """An event class's compiled builder and where its int fields are (:func:`native.int_paths`):
    ``envelope`` and ``data`` hold the spellings of the fields of those two levels, ``nested``
    the paths below them."""

    build: Any
    envelope: tuple[tuple[str, ...], ...]
    data: tuple[tuple[str, ...], ...]
    nested: tuple[tuple[tuple[str, ...], ...], ...]


def _strict_build(build: Any, cls: type[Event]) -> _StrictBuild:
    paths = native.int_paths(native.model_plan(cls))
    return _StrictBuild(
        build,
        tuple(p[0] for p in paths if len(p) == 1 and p[0] != ("sequence",)),
        tuple(p[1] for p in paths if len(p) == 2 and p[0] == ("data",)),
        tuple(p for p in paths if len(p) > 2 or (len(p) == 2 and p[0] != ("data",))),
    )


#: (type, version) -> the compiled builder of its event class (:func:`native.model_builder`)
_BUILDERS: dict[tuple[str, int], Any] = {}
#: event class -> its builder and its int fields, for :func:`validate_exact`
_STRICT_BUILDS: dict[type[Event], _StrictBuild] = {}
for _key, _cls in EVENT_CLASSES.items():
    _builder = native.model_builder(_cls)
    if _builder is not None:
        _BUILDERS[_key] = _builder.build
        _STRICT_BUILDS[_cls] = _strict_build(_builder.build, _cls)


def _text_in_int_field(record: JsonDict, data: JsonDict, ints: _StrictBuild) -> bool:
    """Whether an int field of the exact ``record`` (``data`` its data) holds a string: the
    builder would read a decimal one as its number, a strict validation refuses it.
    ``sequence`` is the int :func:`validate_exact` put there."""
    for names in ints.envelope:
        for name in names:
            if type(record.get(name)) is str:
                return True
    for names in ints.data:
        for name in names:
            if type(data.get(name)) is str:
                return True
    return any(_text_at(record, path) for path in ints.nested)


def _text_at(value: Any, path: tuple[tuple[str, ...], ...]) -> bool:
    """Whether a string sits at ``path`` (any spelling of each key) inside ``value``."""
    if not path:
        return type(value) is str
    if type(value) is not dict:
        return False
    rest = path[1:]
    return any(_text_at(value.get(key), rest) for key in path[0])


def validate_json_form(form: JsonDict) -> Event:
    """A JSON-form event as a validated :class:`Event` (its concrete per-type subclass): built
    by the compiled builder when it is sure, else validated by pydantic (which then also gives
    the reason a form is refused)."""
    key = (form.get("type"), form.get("schemaVersion"))
    build = _BUILDERS.get(key)  # type: ignore[arg-type]
    if build is not None:
        event = build(form)
        if event is not None:
            return cast(Event, event)
    try:
        cls = EVENT_CLASSES.get(key)  # type: ignore[arg-type]
        if cls is None:
            return Event.model_validate(form)  # reports what is missing or unknown
        return cast(Event, cls.__pydantic_validator__.validate_python(form))
    except ValidationError as exc:
        raise InvalidEvent(_short(exc)) from exc
    except EventError:
        raise


#: orjson refuses these instead of converting them its own way: pydantic's JSON mode converts
#: datetimes, dataclasses and subclasses of str/int/dict/list differently, so they go that way.
_PLAIN_JSON = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
#: Envelope fields a JSON form may leave out, all defaulting to None.
_ENVELOPE_NONES: JsonDict = {
    f.alias: None for f in Event.model_fields.values() if not f.is_required() and f.alias
}
_ENVELOPE_KEYS = frozenset(f.alias for f in Event.model_fields.values())
_ACTOR_KEYS = frozenset({"kind", "id"})
#: Per event class: its data fields' defaults (all None) and the set of its data keys.
_DATA_SHAPES: dict[type[Event], tuple[JsonDict, frozenset[str]]] = {}


def _data_shape(cls: type[Event]) -> tuple[JsonDict, frozenset[str]]:
    shape = _DATA_SHAPES.get(cls)
    if shape is None:
        model = cls.model_fields["data"].annotation
        fields = model.model_fields.values()  # type: ignore[union-attr]
        defaults = {f.alias: None for f in fields if not f.is_required() and f.default is None}
        shape = _DATA_SHAPES[cls] = (defaults, frozenset(f.alias for f in fields))
    return shape


def validate_exact(form: JsonDict) -> tuple[Event, JsonDict] | None:
    """The validated event and the record to encode, when ``form`` already is its event's
    JSON form: camelCase keys, plain types that strict validation takes as they are, the
    sequence a decimal string. Then the form itself is encoded, with no ``json_form()``
    round trip. None otherwise: :func:`validate_json_form` then coerces, or says why not.

    Sound because a strict validation changes no value (an int for a float field encodes to
    the same Avro double), and absent optional fields are exactly their None defaults. The
    compiled builder validates first when it can: it accepts only what the strict validation
    accepts, into the same event (``tests/test_publisher_exact_path.py``), at about half the
    cost.
    """
    cls = EVENT_CLASSES.get((form.get("type"), form.get("schemaVersion")))  # type: ignore[arg-type]
    sequence = form.get("sequence")
    data = form.get("data")
    actor = form.get("actor")
    if (
        cls is None
        or type(form["schemaVersion"]) is not int
        or type(sequence) is not str
        or not (sequence.isascii() and sequence.isdigit())
        or type(data) is not dict
        or type(actor) is not dict
        or actor.keys() != _ACTOR_KEYS
    ):
        return None
    defaults, data_keys = _data_shape(cls)
    record = {**_ENVELOPE_NONES, **form, "sequence": int(sequence)}
    if record.keys() != _ENVELOPE_KEYS:
        return None
    if data.keys() != data_keys:
        data = {**defaults, **data}
        if data.keys() != data_keys:
            return None
        record["data"] = data
    strict = _STRICT_BUILDS.get(cls)
    if strict is not None and not _text_in_int_field(record, record["data"], strict):
        # the compiled builder takes plain values as they are, as a strict validation does,
        # except a decimal string in an int field (ruled out just above); when unsure it
        # answers None and pydantic decides
        event = strict.build(record)
        if event is not None:
            return cast(Event, event), record
    try:
        event = cls.__pydantic_validator__.validate_python(record, strict=True)
    except ValidationError:
        return None
    return cast(Event, event), record


def _short(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "event"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
