"""The one signal a service gives when its output cannot take writes now.

Why: a full disk, a read-only folder, a database or an output topic that is down is not a
problem with any event, so it must neither dead-letter anything nor stop the process. The
service raises :class:`StoreUnavailable`; the runtime reports not ready (503 on ``/readyz``),
commits nothing, backs off and retries, and goes on when the output is writable again.
"""

from __future__ import annotations


class StoreUnavailable(Exception):
    """An output store, disk or output topic cannot take writes now; retry later.

    Raise it from :meth:`Service.flush` (or :meth:`Service.tick`). Everything processed
    before it must still be held by the service, so that the retried flush makes it durable.
    Never raise it for one bad event: that is a dead letter.
    """

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"{what} unavailable: {detail}")
        #: The output that failed, e.g. ``capture sink file:///var/rt`` or ``topic runtrail.audit``.
        self.what = what
        self.detail = detail


__all__ = ["StoreUnavailable"]
