"""Settings of the outbox relay: ``RUNTRAIL_OUTBOX_RELAY_*``, overridden by ``-o``."""

from __future__ import annotations

from pydantic import Field

from runtrail.commands.settings import CommandStoreSettings


class OutboxRelaySettings(CommandStoreSettings, service="outbox-relay"):
    """What ``runtrail run outbox-relay`` reads."""

    transactional_id: str = Field(
        default="runtrail-outbox-relay",
        description="Kafka transactional.id: one active relay per store; a new one fences the old.",
    )
    batch_size: int = Field(default=500, ge=1, description="Events published per transaction.")
    idle_poll_s: float = Field(
        default=0.2, gt=0, description="Pause between outbox reads when it is empty."
    )
    retry_s: float = Field(
        default=1.0, gt=0, description="Pause before the relay is rebuilt after a Kafka error."
    )
