"""librdkafka configuration of every runtrail consumer that reads a backlog.

The services' runtime, replay's topic reader, the sessions restore and the resume cache's
reader build their config here, so each catches up without stalling.

librdkafka prefetches into a local queue until it holds ``queued.max.messages.kbytes`` (64 MB
by default) or ``queued.min.messages``; once past that it postpones the next fetch by
``fetch.queue.backoff.ms``, 1000 ms by default. A consumer that empties 64 MB in less than a
second (``noop`` does in about 0.4 s) then finds the queue dry for the rest of the second, on
every refill of a large backlog: measured by ``python -m bench.catch_up``, the rate on a
300,000-event topic fell to 70 % of the rate on one that fits the queue. At 10 ms the refill
starts as soon as the queue has room, and the fetcher's extra wake-ups cost nothing measurable.

These are defaults: ``settings.kafka_options`` and the caller's own settings win.
"""

from __future__ import annotations

from typing import Any

from runtrail.config import Settings

#: Consumer defaults for reading backlogs; ``kafka_options`` may override them.
CATCH_UP_DEFAULTS: dict[str, Any] = {
    "fetch.queue.backoff.ms": 10,
}


def consumer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    """``settings.kafka_config(**overrides)`` with :data:`CATCH_UP_DEFAULTS` under them."""
    config = settings.kafka_config(**overrides)
    for key, value in CATCH_UP_DEFAULTS.items():
        config.setdefault(key, value)
    return config
