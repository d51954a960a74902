"""The positions a service keeps in its own store, read and moved by the operator.

Audit, projector and resume-cache write their next offsets in the same transaction as their
output and seek there on assignment, so moving only the consumer group's offsets has no effect
on them. Each adapter here opens the store the service itself would open (its settings class,
the same ``-o`` options) and writes through the store's explicit rewind path, the one write
its "positions never move back" fence lets through. Store-less services (noop, capture,
sessions) have none: their group's committed offsets are their positions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from runtrail.config import Settings

#: How ``show`` prints a partition the store would start from its beginning.
BEGINNING = -2


class StoreMissing(ValueError):
    """The store the options name does not exist: moving positions there would move nothing."""


def _require_file(path: str, service: str, where: str) -> None:
    """An SQLite store must already exist: a mistyped path would otherwise become a new, empty
    store that takes the positions while the service's real store keeps its own."""
    from runtrail.persistence.sqlite import NoDatabase, require_database

    try:
        require_database(path)
    except NoDatabase:
        raise StoreMissing(
            f"no {service} store at {path} ({where}); give the service's store with "
            "-o store_url=… (as for `runtrail run`) or --state-dir"
        ) from None


class StorePositions(Protocol):
    """Next offset per partition as the service's store holds it."""

    #: What is shown to the operator: the store's redacted URL.
    where: str
    #: Where the service starts a partition its store never wrote: at the group's committed
    #: offset (True), or at the partition's beginning (False: a chain or a projection needs
    #: every event).
    falls_back_to_group: bool

    def read(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """Where the service starts each partition (absent: never stored; BEGINNING: from 0)."""
        ...

    def write(self, topic: str, offsets: Mapping[int, int]) -> None:
        """Move the stored positions (back or forward)."""
        ...

    def close(self) -> None: ...


class _AuditPositions:
    """Sealed and published positions (:mod:`runtrail_services.audit.positions`), moved together:
    the service starts at the lower of the two."""

    falls_back_to_group = False

    @staticmethod
    def resolve(settings: Settings, options: Mapping[str, str]) -> str:
        from runtrail_services.audit.settings import AuditSettings

        return AuditSettings.load(options).resolved_store_url(settings.state_dir)

    def __init__(self, url: str, options: Mapping[str, str]) -> None:
        from runtrail.persistence.kinds import AUDIT_LINKS
        from runtrail.persistence.registry import open_store
        from runtrail.persistence.urls import redact_url, sqlite_path
        from runtrail_services.audit.settings import AuditSettings

        self.publishing = AuditSettings.load(options).publish
        self.where = redact_url(url)
        if url.startswith("sqlite:"):
            _require_file(sqlite_path(url), "audit", self.where)
        self._store = open_store(AUDIT_LINKS, url)

    def read(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        from runtrail_services.audit.positions import start_positions

        found = start_positions(
            self._store, [(topic, p) for p in partitions], publishing=self.publishing
        )
        stored = self._store.stored_offsets(topic, partitions)
        return {p: o for (_, p), o in found.start.items() if p in stored}

    def write(self, topic: str, offsets: Mapping[int, int]) -> None:
        from runtrail.audit.store import TopicPartition
        from runtrail_services.audit.positions import published_name

        moved: dict[TopicPartition, int] = {}
        for partition, offset in offsets.items():
            moved[TopicPartition(topic, partition)] = offset
            moved[TopicPartition(published_name(topic), partition)] = offset
        self._store.rewind_offsets(moved)

    def close(self) -> None:
        self._store.close()


class _ProjectorPositions:
    falls_back_to_group = False

    @staticmethod
    def resolve(settings: Settings, options: Mapping[str, str]) -> str:
        from runtrail_services.projector.settings import ProjectorSettings

        return ProjectorSettings.load(options).resolved_store_url(settings.state_dir)

    def __init__(self, url: str, options: Mapping[str, str]) -> None:
        from runtrail.persistence.kinds import PROJECTIONS
        from runtrail.persistence.registry import open_store
        from runtrail.persistence.urls import redact_url
        from runtrail.projection.store_sqlite import path_of

        self.where = redact_url(url)
        if url.startswith("sqlite:"):
            _require_file(path_of(url), "projector", self.where)
        self._store = open_store(PROJECTIONS, url)

    def read(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        return self._store.stored_offsets(topic, partitions)

    def write(self, topic: str, offsets: Mapping[int, int]) -> None:
        self._store.rewind_offsets(topic, offsets)

    def close(self) -> None:
        self._store.close()


class _ResumeCachePositions:
    falls_back_to_group = True

    @staticmethod
    def resolve(settings: Settings, options: Mapping[str, str]) -> str:
        from runtrail_services.resume_cache.settings import ResumeCacheSettings

        return ResumeCacheSettings.load(options).resolved_store_url(settings.state_dir)

    def __init__(self, url: str, options: Mapping[str, str]) -> None:
        from runtrail.persistence.kinds import RESUME_ENTRIES
        from runtrail.persistence.registry import open_store
        from runtrail.persistence.urls import redact_url, sqlite_path

        self.where = redact_url(url)
        if url.startswith("sqlite:"):
            _require_file(sqlite_path(url), "resume-cache", self.where)
        self._store = open_store(RESUME_ENTRIES, url, readers=1)

    def read(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        stored = self._store.offsets(topic)
        return {p: stored[p] for p in partitions if p in stored}

    def write(self, topic: str, offsets: Mapping[int, int]) -> None:
        self._store.rewind_offsets(topic, offsets)

    def close(self) -> None:
        self._store.close()


_ADAPTERS: dict[str, type[_AuditPositions | _ProjectorPositions | _ResumeCachePositions]] = {
    "audit": _AuditPositions,
    "projector": _ProjectorPositions,
    "resume-cache": _ResumeCachePositions,
}


def store_url(service: str, settings: Settings, options: Mapping[str, str]) -> str | None:
    """The URL of the store ``runtrail run SERVICE`` would open with these options (None for
    a service that keeps no positions of its own)."""
    adapter = _ADAPTERS.get(service)
    return adapter.resolve(settings, options) if adapter is not None else None


def open_store_positions(
    service: str, settings: Settings, options: Mapping[str, str]
) -> StorePositions | None:
    """The service's store positions, or None for a service that keeps none.

    :class:`StoreMissing` for an SQLite file that does not exist; the driver's own error
    (``sqlite3.Error``, ``psycopg.Error``…) for a store that cannot be opened: the CLI names
    the store (:func:`store_url`) around it."""
    url = store_url(service, settings, options)
    return _ADAPTERS[service](url, options) if url is not None else None
