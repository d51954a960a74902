"""Publishing the latest snapshot of each session to the compacted sessions topic.

Sent only for snapshots already durable in the store, and flushed before the runtime commits
offsets (:meth:`PointerPublisher.flush` raises ``StoreUnavailable`` until every pointer is
acknowledged, so nothing is committed past a save whose pointer is not delivered). Large
snapshots are uploaded first and the message carries their reference and digest.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from runtrail.config import Settings
from runtrail.kafka.output_topic import CONFIRM_TIMEOUT_S, OutputTopic
from runtrail.runtime.unavailable import StoreUnavailable
from runtrail.sessions import AgentSessionSnapshot, SessionStoreError
from runtrail.sessions.blobs import SnapshotBlobStore
from runtrail.sessions.naming import session_key
from runtrail.sessions.pointer import PointerMessage, pointer_message

log = logging.getLogger(__name__)


class PointerPublisher:
    """An idempotent producer of :class:`~runtrail.sessions.pointer.SessionPointer` messages,
    keyed by tenant + session.

    An outage of the sessions topic or of the blob store is :class:`StoreUnavailable` (the
    runtime reports not ready and retries); queued pointers are kept until acknowledged and
    delivered in order when the broker returns, never dropped.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        blobs: SnapshotBlobStore | None,
        inline_limit: int,
        topic: str | None = None,
    ) -> None:
        self.topic = topic or settings.sessions_topic
        self.blobs = blobs
        self.inline_limit = inline_limit
        self._out = OutputTopic(
            settings,
            self.topic,
            client_id=f"runtrail-sessions-{os.getpid()}",
            on_too_large=self._too_large,
            overrides={"linger.ms": 20},
        )

    def send(self, snapshot: AgentSessionSnapshot) -> PointerMessage:
        """Queue the pointer to ``snapshot`` (uploading it first if it is large)."""
        try:
            message = pointer_message(
                snapshot, snapshot.to_bytes(), inline_limit=self.inline_limit, blobs=self.blobs
            )
        except (OSError, SessionStoreError) as exc:
            raise StoreUnavailable("sessions snapshot blob store", str(exc)) from exc
        self._out.send(message.key, message.value, tag=message.key)
        self._out.poll()
        return message

    def forget(self, sessions: Sequence[tuple[str, str]]) -> None:
        """Tombstone the pointers of ``(tenant, session)`` (retention is deleting them), all
        acknowledged; :class:`StoreUnavailable` if not."""
        for tenant, session in sessions:
            key = session_key(tenant, session).encode()
            self._out.send(key, None, tag=key)
        self.flush()

    @staticmethod
    def _too_large(key: Any, detail: str) -> None:
        # Snapshots above inline_limit go by reference, so only a tiny limit gets here; the
        # snapshot itself is durable in the store, only its pointer is missing.
        log.error("sessions: pointer %r not published: %s", key, detail)

    @property
    def pending(self) -> int:
        """Pointers sent and not acknowledged yet."""
        return self._out.unacknowledged

    def flush(self, timeout_s: float = CONFIRM_TIMEOUT_S) -> None:
        """Wait for every queued pointer; :class:`StoreUnavailable` if not all acknowledged."""
        self._out.confirm(timeout_s)

    def close(self) -> None:
        self._out.close()
