"""The event envelope of seed 002 plus the runtime coordinates of seed 000.

``Event`` is the validated, current-version form every handler receives. Its JSON form
(camelCase, ``sequence`` as a base-10 string) is what ``runtrail publish`` reads, what capture
files and audit exports hold and what the audit chain hashes.

Payload models subclass :class:`EventData` with ``event_type`` and ``version`` class
variables; subclassing registers them, so the envelope can pick the payload model for any
(type, version) without a hand-kept table.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    create_model,
    field_serializer,
)
from pydantic.alias_generators import to_camel

from runtrail.events.errors import InvalidEvent, UnknownEventType
from runtrail.events.jsonform import canonical_bytes
from runtrail.events.native import CompiledDumper, json_dumper

ActorKind = Literal["user", "agent", "service", "operator"]

#: A field holding any JSON value (a prompt, a raw provider payload, tool arguments or output).
#: Not validated node by node: on decode it comes from a JSON parser, on encode it must pass
#: orjson, so walking the tree again would only cost time on the hot path.
JsonValue = Annotated[Any, "runtrail.json"]


class CamelModel(BaseModel):
    """Base for every event model: camelCase on the wire, snake_case in Python, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="forbid",
    )


#: (event type, schema version) -> payload model. Filled by ``EventData.__init_subclass__``.
DATA_MODELS: dict[tuple[str, int], type[EventData]] = {}
#: event type -> its current (highest) schema version.
CURRENT_VERSIONS: dict[str, int] = {}


class EventData(CamelModel):
    """Base of every event payload. Subclasses set ``event_type`` and ``version``."""

    event_type: ClassVar[str] = ""
    version: ClassVar[int] = 1

    def json_form(self) -> dict[str, Any]:
        """The payload as published (camelCase), as the event's JSON form holds it."""
        return _json_form(self)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.event_type:
            return
        key = (cls.event_type, cls.version)
        if key in DATA_MODELS:
            raise TypeError(f"event {key} is declared twice ({DATA_MODELS[key].__name__})")
        DATA_MODELS[key] = cls
        CURRENT_VERSIONS[cls.event_type] = max(CURRENT_VERSIONS.get(cls.event_type, 0), cls.version)
        EVENT_CLASSES[key] = _event_class(cls)


def data_model(event_type: str, version: int) -> type[EventData]:
    """The payload model of a type and version, or :class:`UnknownEventType`."""
    try:
        return DATA_MODELS[(event_type, version)]
    except KeyError:
        known = CURRENT_VERSIONS.get(event_type)
        detail = f"no version {version} (current is {known})" if known else "unknown type"
        raise UnknownEventType(f"event type {event_type!r} v{version}: {detail}") from None


class Actor(CamelModel):
    """Who caused the event."""

    kind: ActorKind
    id: str


ISO_8601 = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$"
NonBlank = Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]
Timestamp = Annotated[str, StringConstraints(pattern=ISO_8601)]

#: (event type, schema version) -> the concrete Event subclass whose ``data`` is that payload.
EVENT_CLASSES: dict[tuple[str, int], type[Event]] = {}


#: per event or payload class, its compiled JSON-form dumper (None: pydantic's serializer)
_DUMPERS: dict[type[Any], CompiledDumper | None] = {}


def _dumper(cls: type[Any]) -> CompiledDumper | None:
    try:
        return _DUMPERS[cls]
    except KeyError:
        dump = _DUMPERS[cls] = json_dumper(cls)
        return dump


def _json_form(model: CamelModel) -> dict[str, Any]:
    """``model.model_dump(mode="json", by_alias=True)``: by the class's compiled dumper when
    there is one (:func:`~runtrail.events.native.json_dumper`: the same dict, without
    pydantic's serializer), else by pydantic."""
    dump = _dumper(type(model))
    if dump is not None:
        form = dump(model)
        if form is not None:
            return form
        # a value the plan does not cover: pydantic dumps it
    return model.model_dump(mode="json", by_alias=True)


class _Envelope(CamelModel):
    """The envelope fields and their constraints."""

    event_id: NonBlank
    run_id: NonBlank
    tenant_id: NonBlank
    sequence: Annotated[int, Field(ge=1)]
    type: NonBlank
    schema_version: int
    occurred_at: Timestamp
    recorded_at: Timestamp | None = None
    actor: Actor
    causation_event_id: str | None = None
    correlation_id: NonBlank
    session_id: str | None = None
    turn_id: str | None = None
    step: int | None = None
    data: EventData

    @field_serializer("sequence")
    def _sequence_as_decimal(self, value: int) -> str:
        return str(value)

    def json_form(self) -> dict[str, Any]:
        """The camelCase JSON form of the seeds (``sequence`` as a decimal string)."""
        return _json_form(self)

    def canonical_bytes(self) -> bytes:
        """``canonical_bytes(self.json_form())``: RFC 8785 bytes of the JSON form, written by
        the class's compiled dumper straight from the event where it can (no form built),
        else from the form; the same bytes, or the same error, either way."""
        dump = _dumper(type(self))
        write = getattr(dump, "canonical", None)  # None: an extension built before it
        if write is not None:
            written = write(self)
            if written is not None:
                return cast(bytes, written)
        return canonical_bytes(_json_form(self))


class Event(_Envelope):
    """One validated event: envelope fields plus a typed payload.

    Every (type, version) has a concrete subclass whose ``type``, ``schemaVersion`` and
    ``data`` are pinned, so validating one is a single pass inside pydantic-core, with no
    Python validator on a consumer's hot path. ``Event(...)`` and ``Event.model_validate``
    pick the subclass from ``type`` and ``schemaVersion`` (a field typed ``Event`` in another
    model accepts events, not raw dicts: validate those with ``Event.model_validate``).
    Build events through ``Event`` (or the codec), not by calling a concrete class with
    keywords: those allocate with the bare ``object.__new__``, which takes no arguments.
    """

    def __new__(cls, *args: Any, **values: Any) -> Self:
        """``Event(type=…, schema_version=…, …)`` allocates the concrete class, whose pydantic
        ``__init__`` then validates the values once. The concrete classes do not come here:
        they allocate with ``object.__new__`` (see :func:`_event_class`)."""
        target = _concrete(values) if cls is Event and values else cls
        return cast(Self, super().__new__(target))

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        """On ``Event`` itself, validate with the concrete class of (type, schemaVersion)."""
        if cls is Event and isinstance(obj, dict):
            return _concrete(obj).model_validate(obj, *args, **kwargs)  # type: ignore[return-value]
        return super().model_validate(obj, *args, **kwargs)


def _concrete(values: dict[str, Any]) -> type[Event]:
    event_type = values.get("type")
    version = values.get("schemaVersion", values.get("schema_version"))
    if not isinstance(event_type, str):
        raise InvalidEvent(f"'type' must be a string naming the event type, {_got(event_type)}")
    if type(version) is not int:
        raise InvalidEvent(f"'schemaVersion' of {event_type} must be an integer, {_got(version)}")
    cls = EVENT_CLASSES.get((event_type, version))
    if cls is None:
        data_model(event_type, version)  # raises UnknownEventType with the precise reason
        raise AssertionError("unreachable")
    return cls


def _got(value: Any) -> str:
    """What a malformed envelope field holds, short enough for a one-line rejection."""
    if value is None:
        return "but it is missing"
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"not {type(value).__name__} {shown}"


def _event_class(model: type[EventData]) -> type[Event]:
    """The concrete Event subclass for one payload model (made once, at registration)."""
    name = f"{model.__name__}Event"
    # create_model's overloads differ between pydantic releases; the call itself is stable.
    cls: type[Event] = cast(Any, create_model)(
        name,
        __base__=Event,
        __module__=__name__,
        type=(Literal[model.event_type], ...),
        schema_version=(Literal[model.version], ...),
        data=(model, ...),
    )
    # pydantic-core allocates every validated instance through its class's __new__: the plain
    # object.__new__ keeps that a C call, where Event.__new__ would cost each decoded event a
    # Python call (about 6% of validating one).
    cls.__new__ = object.__new__  # type: ignore[method-assign]
    return cls
