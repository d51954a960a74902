"""The event envelope of seed 002 plus the runtime coordinates of seed 000.

``Event`` is the validated, current-version form every handler receives. Its JSON form
(camelCase, ``sequence`` as a base-10 string) is what ``runtrail publish`` reads, what capture
files and audit exports hold and what the audit chain hashes.

Payload models subclass :class:`EventData` with ``event_type`` and ``version`` class
variables; subclassing registers them, so the envelope can pick the payload model for any
(type, version) without a hand-kept table.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializeAsAny,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from runtrail.events.errors import UnknownEventType

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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.event_type:
            return
        key = (cls.event_type, cls.version)
        if key in DATA_MODELS:
            raise TypeError(f"event {key} is declared twice ({DATA_MODELS[key].__name__})")
        DATA_MODELS[key] = cls
        CURRENT_VERSIONS[cls.event_type] = max(CURRENT_VERSIONS.get(cls.event_type, 0), cls.version)


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


class Event(CamelModel):
    """One validated event: envelope fields plus a typed payload."""

    event_id: str
    run_id: str
    tenant_id: str
    sequence: int
    type: str
    schema_version: int
    occurred_at: str
    recorded_at: str | None = None
    actor: Actor
    causation_event_id: str | None = None
    correlation_id: str
    session_id: str | None = None
    turn_id: str | None = None
    step: int | None = None
    data: SerializeAsAny[EventData]

    @model_validator(mode="before")
    @classmethod
    def _typed_payload(cls, values: Any) -> Any:
        """Validate ``data`` with the payload model of (type, schemaVersion)."""
        if not isinstance(values, dict):
            return values
        data = values.get("data")
        if isinstance(data, EventData):
            return values
        event_type = values.get("type")
        version = values.get("schemaVersion", values.get("schema_version"))
        if (
            not isinstance(event_type, str)
            or not isinstance(version, int)
            or isinstance(version, bool)
        ):
            return values  # field validation reports the missing/ill-typed envelope fields
        model = data_model(event_type, version)
        try:
            parsed = model.model_validate(data if data is not None else {})
        except ValidationError as exc:
            raise ValueError(f"data of {event_type} v{version}: {exc}") from None
        return {**values, "data": parsed}

    @field_validator("sequence", mode="before")
    @classmethod
    def _sequence_from_decimal(cls, value: Any) -> Any:
        """Accept the seed's base-10 string form as well as an integer."""
        if isinstance(value, str):
            if not value.isdigit():
                raise ValueError("sequence must be a base-10 non-negative integer")
            return int(value)
        return value

    @field_validator("sequence")
    @classmethod
    def _sequence_positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError("sequence starts at 1")
        return value

    @field_validator("event_id", "run_id", "tenant_id", "correlation_id", "type")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("occurred_at", "recorded_at")
    @classmethod
    def _iso_timestamp(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"not an ISO-8601 timestamp: {value!r}") from None
        return value

    @model_validator(mode="after")
    def _payload_matches_envelope(self) -> Event:
        data = self.data
        if (data.event_type, data.version) != (self.type, self.schema_version):
            raise ValueError(
                f"data is {data.event_type} v{data.version} but envelope says "
                f"{self.type} v{self.schema_version}"
            )
        return self

    @field_serializer("sequence")
    def _sequence_as_decimal(self, value: int) -> str:
        return str(value)

    def json_form(self) -> dict[str, Any]:
        """The camelCase JSON form of the seeds (``sequence`` as a decimal string)."""
        return self.model_dump(mode="json", by_alias=True)
