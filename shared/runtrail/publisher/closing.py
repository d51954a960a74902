"""The order in which the publisher's parts stop at close, so that nothing accepted is lost.

Why this order: a spool being sent gets the time first; then the threads stop (a probe or a
scan produces nothing once ``stop`` is set); then what is in flight is flushed or taken back;
then the drain leaves every unsettled event in the spool, and the committer writes it and
moves the cursor no further than the first unsettled one. The next publisher on the same
folder sends the rest.
"""

from __future__ import annotations

import logging
import threading
import time

from runtrail.publisher.committer import SpoolCommitter
from runtrail.publisher.drain import Drain
from runtrail.publisher.ledger import Ledger
from runtrail.publisher.metrics import PublisherMetrics
from runtrail.publisher.wal import Wal

#: the façade's logger: a filter on the publisher's log sees what its close says
log = logging.getLogger("runtrail.publisher.publisher")


def close_parts(
    drain: Drain,
    committer: SpoolCommitter,
    wal: Wal,
    ledger: Ledger,
    metrics: PublisherMetrics,
    lock: threading.RLock,
    stop: threading.Event,
    timeout: float,
) -> None:
    """Stop the drain and the committer within about ``timeout`` seconds, leaving what is
    unconfirmed in the spool (see the module docstring)."""
    deadline = time.monotonic() + max(0.0, timeout)
    if drain.draining:  # the spool is being sent: give it the time we have
        drain.wait_drained(timeout)
    stop.set()
    drain.join(timeout=max(3.0, deadline - time.monotonic()))
    committer.join(timeout=5.0)
    try:
        if not drain.draining:
            drain.wait_delivered(deadline - time.monotonic())
            committer.commit()
        drain.collect()
    except Exception:
        log.exception("error while closing the producer")
    with lock:
        drain.leave_in_spool()
    try:
        committer.commit(store=True)
        wal.close()
    except OSError:
        log.exception("error while closing the spool %s", wal.folder)
    depth = ledger.pending
    metrics.set_spool_depth(depth)
    if depth:
        log.warning("closed with %d events in the spool %s", depth, wal.folder)
