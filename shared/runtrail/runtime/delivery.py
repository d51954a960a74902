"""What a service receives: a validated event with its source coordinates (or, for a service of
a topic that holds no runtrail events, the record as consumed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, cast

from confluent_kafka import Message

if TYPE_CHECKING:  # the contract of a service, which its importers need without the event model
    from runtrail.events import Event

#: (topic, partition)
Partition = tuple[str, int]


class Delivered(NamedTuple):
    """One consumed event: current-version ``event``, the ``written`` JSON form, and where it came from.

    ``message`` is the consumed Kafka message itself (a reference, not a copy): dead letters
    are sent with its exact value and headers, whoever wrote them. It is None only for events
    built by hand (tests, replays), which are re-encoded when dead-lettered.

    A named tuple, not a frozen dataclass: immutable all the same, and built in C, where a
    frozen dataclass's ``__init__`` makes one ``object.__setattr__`` call per field (about a
    microsecond per consumed event, on every service's hot path).
    """

    event: Event
    #: None for a service that does not read it (``Service.reads_written = False``): the
    #: compiled path then builds the event straight from the bytes and never this form
    written: dict[str, Any] | None
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    message: Message | None = None

    @property
    def source(self) -> Partition:
        return (self.topic, self.partition)

    def written_form(self) -> dict[str, Any]:
        """``written``, for a service that reads it (``reads_written``, the default)."""
        if self.written is None:
            raise TypeError(
                "this event was delivered without its written JSON form: a service that "
                "reads Delivered.written must keep Service.reads_written = True"
            )
        return self.written


class RawRecord(NamedTuple):
    """One consumed record of a topic whose values are not runtrail events (the raw OTLP spans
    the receivers forward): handed to a :class:`~runtrail.runtime.service.RawService` as it
    was consumed, with the same coordinates as :class:`Delivered`, so the consume loop, the
    dead letters and the checkpoint treat both alike."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    message: Message

    @property
    def source(self) -> Partition:
        return (self.topic, self.partition)

    def header(self, name: str) -> bytes | None:
        """The value of the record's header ``name`` (the first one), if any."""
        for key, value in cast(list[tuple[str, Any]], self.message.headers() or []):
            if key == name:
                return value if isinstance(value, bytes) else None
        return None
