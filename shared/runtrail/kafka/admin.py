"""Every AdminClient runtrail makes: one that looks topics up without creating them.

librdkafka's AdminClient is a producer handle underneath, and a producer's metadata request
asks the broker to create the topics it names (``allow.auto.create.topics`` defaults to true
for producers). On a broker with ``auto.create.topics.enable=true`` (Kafka's default), a
``list_topics("typo")`` therefore *creates* ``typo``, with the broker's defaults (one
partition, no compaction, none of the design's limits), and the caller sees an empty topic
instead of "does not exist". A metadata lookup is never a request to create: runtrail creates
topics only explicitly (``runtrail topics ensure``, :mod:`runtrail.kafka.topics`).

The setting is forced over whatever ``kafka_options`` say. Consumers default to false already;
producers (the publisher, the relay) keep librdkafka's default: that is their own decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from confluent_kafka.admin import AdminClient

#: What makes a metadata request name a topic without asking the broker to create it.
NO_AUTO_CREATE: Final[Mapping[str, Any]] = {"allow.auto.create.topics": False}


def admin_client(config: Mapping[str, Any]) -> AdminClient:
    """An AdminClient with ``config``: a topic it looks up that does not exist is reported as
    absent (``UNKNOWN_TOPIC_OR_PART``), never created."""
    return AdminClient({**config, **NO_AUTO_CREATE})
