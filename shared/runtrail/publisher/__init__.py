"""The agent-side publisher: redact, validate, sequence and send events; spool when Kafka is down.

Each name below is imported from its module on first use (:mod:`runtrail.lazy_exports`): a
reader of one part (the redaction rules, the spool's record format) does not load the
publisher's machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtrail.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from runtrail.kafka.producer_config import producer_config
    from runtrail.publisher.metrics import PublisherStats
    from runtrail.publisher.publisher import Publisher, Submitted
    from runtrail.publisher.redaction import REDACTED, Redactor, default_redactor, no_redaction
    from runtrail.publisher.spool_record import SpoolRecord

__getattr__ = lazy_exports(
    __name__,
    {
        "runtrail.kafka.producer_config": ("producer_config",),
        ".metrics": ("PublisherStats",),
        ".publisher": ("Publisher", "Submitted"),
        ".redaction": ("REDACTED", "Redactor", "default_redactor", "no_redaction"),
        ".spool_record": ("SpoolRecord",),
    },
)

__all__ = [
    "REDACTED",
    "Publisher",
    "PublisherStats",
    "Redactor",
    "SpoolRecord",
    "Submitted",
    "default_redactor",
    "no_redaction",
    "producer_config",
]
