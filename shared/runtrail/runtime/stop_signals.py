"""SIGTERM and SIGINT for long-running processes (services and receivers): stop cleanly, even
when the signal arrives while the process is still starting.

A supervisor (the dev stack, Kubernetes, a test) may send SIGTERM a moment after it started a
service. Python's default handler would kill it mid-import with status -15, and a service that
is told to stop must still flush, commit and exit 0. So ``runtrail run`` calls :func:`hold`
before it imports anything heavy; a signal then is remembered, and :func:`install` hands it to
the process's own stop the moment that exists. One mechanism for all of them.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from types import FrameType

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_held: list[int] = []


def _remember(signum: int, frame: FrameType | None) -> None:
    _held.append(signum)


def hold() -> None:
    """Remember stop signals until :func:`install` is called (only where one will be)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _remember)


def install(name: str, request_stop: Callable[[], None]) -> None:
    """Route SIGTERM/SIGINT to ``request_stop``; a signal held since start-up stops it now."""

    def handle(signum: int, frame: FrameType | None) -> None:
        log.info("%s: signal %d, stopping", name, signum)
        request_stop()

    for signum in STOP_SIGNALS:
        signal.signal(signum, handle)
    if _held:
        log.info("%s: signal %d during start-up, stopping", name, _held[0])
        _held.clear()
        request_stop()
