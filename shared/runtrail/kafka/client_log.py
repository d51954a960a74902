"""librdkafka's log lines, through Python ``logging``, one readable line per condition.

A client given a ``logger`` in its config hands every log line to it (when the client is
polled) instead of writing raw ``%3|…|FAIL|…`` lines to stderr; with a broker down it logs a
failed connect several times a second. :class:`RateLimit`, installed on every logger
:func:`client_logger` returns, lets the first line of a condition through and holds back the
repeats for a window; the next line of that condition after the window says how many were
held back. A condition is the facility plus the message with its numbers (addresses, ports,
durations) blanked, so a retry loop counts as one condition however its timings vary.

Stdlib only: :mod:`runtrail.config` (the core install) puts the logger into every client config.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

#: The logger every runtrail Kafka client logs to unless its caller names another.
CLIENT_LOGGER = "runtrail.kafka.client"
#: Seconds a condition stays quiet after it was logged.
WINDOW_S = 30.0
#: Conditions remembered at most; older ones are forgotten first (a bound, not a policy).
MAX_CONDITIONS = 1000

_NUMBERS = re.compile(r"\d+")
#: librdkafka's "[thrd:…]: " prefix: which internal thread logged, noise for a reader.
_THREAD = re.compile(r"^\[thrd:[^\]]*\]:\s*")
#: librdkafka's own count of repeats it held back (", 1 identical error(s) suppressed"): the
#: line after such a pause is the same condition as the one before it.
_ITS_SUPPRESSED = re.compile(r",\s*\d+ identical error\(s\) suppressed")


def condition(facility: str, message: str) -> str:
    """What makes two lines "the same condition": facility and message, numbers blanked,
    librdkafka's own count of held-back repeats left out."""
    message = _ITS_SUPPRESSED.sub("", _THREAD.sub("", message))
    return f"{facility}|{_NUMBERS.sub('#', message)}"


def _librdkafka_parts(record: logging.LogRecord) -> tuple[str, str, str] | None:
    """(facility, client name, message) of a line as confluent-kafka logs it, else None."""
    args = record.args
    if record.msg == "%s [%s] %s" and isinstance(args, tuple) and len(args) == 3:
        return str(args[0]), str(args[1]), str(args[2])
    return None


class RateLimit(logging.Filter):
    """Pass the first line of a condition, drop its repeats for ``window`` seconds, and tell
    on the next one passed how many were dropped. Thread-safe (clients log from poll calls
    of any thread)."""

    def __init__(
        self, window: float = WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.window = window
        self._clock = clock
        self._lock = threading.Lock()
        #: condition -> (when it was last let through, repeats dropped since)
        self._seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        parts = _librdkafka_parts(record)
        if parts is None:
            text = record.getMessage()
            key = condition("", text)
        else:
            facility, client, message = parts
            message = _THREAD.sub("", message)
            key = condition(facility, message)
            text = f"{client}: {message} ({facility})"
        now = self._clock()
        with self._lock:
            last = self._seen.get(key)
            if last is not None and now - last[0] < self.window:
                self._seen[key] = (last[0], last[1] + 1)
                return False
            dropped = last[1] if last is not None else 0
            self._seen.pop(key, None)  # re-inserted last: the dict stays oldest-first
            self._seen[key] = (now, 0)
            while len(self._seen) > MAX_CONDITIONS:
                del self._seen[next(iter(self._seen))]
        if dropped:
            text += f" [{dropped} similar line(s) suppressed since the last one shown]"
        record.msg, record.args = text, None
        return True


_install_lock = threading.Lock()


def client_logger(name: str = CLIENT_LOGGER) -> logging.Logger:
    """The logger for a Kafka client's config, with :class:`RateLimit` installed (once)."""
    logger = logging.getLogger(name)
    with _install_lock:
        if not any(isinstance(f, RateLimit) for f in logger.filters):
            logger.addFilter(RateLimit())
    return logger


def quiet_unless_verbose(verbosity: int, name: str = CLIENT_LOGGER) -> logging.Logger:
    """:func:`client_logger`, silenced without ``-v``: for a command whose own error message
    already says what the client would log (an unreachable cluster, reported once)."""
    logger = client_logger(name)
    logger.setLevel(logging.DEBUG if verbosity > 0 else logging.CRITICAL)
    return logger


def with_client_logger(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config that holds a logger (:func:`client_logger`'s unless it has
    one), for code handed a config rather than the settings."""
    return {**config, "logger": config.get("logger") or client_logger()}
