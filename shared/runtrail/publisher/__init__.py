"""The agent-side publisher: redact, validate, sequence and send events; spool when Kafka is down."""

from runtrail.kafka.producer_config import producer_config
from runtrail.publisher.metrics import PublisherStats
from runtrail.publisher.publisher import Publisher, Submitted
from runtrail.publisher.redaction import REDACTED, Redactor, default_redactor, no_redaction
from runtrail.publisher.spool_record import SpoolRecord

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
