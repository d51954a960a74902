"""Ctrl-C during a rebuild, taken at safe points.

Python's default SIGINT handler raises KeyboardInterrupt at whatever bytecode the main thread
runs: in a weakref callback, a queue's cleanup or a Kafka client's callback CPython prints it
and drops it, and the replay goes on to the end as if nothing was asked. Instead, Ctrl-C sets
a flag that the rebuild checks where stopping is safe (between batches, at the workers' ticks,
before the store is marked finished) and raises there.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def ctrl_c_sets(flag: threading.Event) -> Iterator[threading.Event]:
    """Within, SIGINT sets ``flag`` (main thread only; elsewhere nothing is installed)."""
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def on_sigint(signum: int, frame: object) -> None:
        flag.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def raise_if_set(flag: threading.Event) -> None:
    """KeyboardInterrupt when Ctrl-C was pressed (the flag :func:`ctrl_c_sets` set)."""
    if flag.is_set():
        raise KeyboardInterrupt
