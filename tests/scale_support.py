"""Members of one consumer group coming and going under a steady stream (real processes).

What the scale-out tests share: a thread producing rounds of events until the group is down to
its last member, the hand-over (each member joins, then the one before it leaves), and the
check that no member took a rebalance for an outage.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from tests.support import ServiceProcess, produce_forms, wait_for

#: what the runner logs when it enters an outage (pauses, answers 503, commits nothing)
OUTAGE_LINE = "pausing consumption and retrying"


def log_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def outages(logs: Iterable[Path], *also: str) -> list[str]:
    """The lines of ``logs`` where a member entered an outage (or that hold one of ``also``)."""
    marks = (OUTAGE_LINE, *also)
    return [
        line
        for log in logs
        for line in log_text(log).splitlines()
        if any(mark in line for mark in marks)
    ]


class SteadyStream:
    """``make_round(k)`` produced every 0.3 s on a thread, at least ``rounds`` of them and on
    until :meth:`stop`; ``produced`` counts the events by their ``count_by`` field."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        make_round: Callable[[int], list[dict[str, Any]]],
        count_by: str,
        rounds: int = 20,
    ) -> None:
        self.produced: Counter[str] = Counter()
        self._stop = threading.Event()

        def run() -> None:
            k = 0
            while not self._stop.is_set() or k < rounds:
                batch = make_round(k)
                produce_forms(bootstrap, topic, batch)
                self.produced.update(str(f[count_by]) for f in batch)
                k += 1
                time.sleep(0.3)

        self._thread = threading.Thread(target=run)

    def __enter__(self) -> SteadyStream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def stop(self) -> None:
        """No more rounds once the minimum is produced; returns when the last was delivered."""
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), "the stream did not end"


def hand_over(
    start: Callable[[int], ServiceProcess],
    log_of: Callable[[int], Path],
    count: int = 3,
    leaving: Callable[[int, ServiceProcess], None] | None = None,
) -> list[ServiceProcess]:
    """``count`` members one after another: each joins (its log shows an assignment), works two
    seconds beside the one before, which then leaves (SIGTERM, exit 0). ``leaving(i, member)``
    is called just before member ``i`` is asked to leave (to read its /metrics while it runs).
    The last keeps running; the caller closes them all."""
    members: list[ServiceProcess] = []
    try:
        for i in range(count):
            members.append(start(i))
            wait_for(lambda i=i: "assigned" in log_text(log_of(i)), 60, what=f"member {i} assigned")
            time.sleep(2)
            if i:
                if leaving is not None:
                    leaving(i - 1, members[i - 1])
                assert members[i - 1].terminate() == 0
    except BaseException:
        for member in members:
            member.close()
        raise
    return members


def assignor(bootstrap: str, group: str, timeout: float = 30.0) -> str:
    """The assignment strategy the group's members agreed on (the broker's word), read once
    the group is stable (while it rebalances the broker may not name one yet)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found: list[str] = []

    def stable() -> bool:
        described = admin.describe_consumer_groups([group])[group].result(10)
        found[:] = [str(described.partition_assignor)]
        return bool(described.state == ConsumerGroupState.STABLE)

    wait_for(stable, timeout, 0.2, what=f"group {group} stable")
    return found[0]
