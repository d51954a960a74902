"""How the publisher turns any failure of one event into a counted, logged rejection.

Why apart: nothing raises into the agent (design principle 3), so every step's exception
(a limit, a validation, the protector, a closed publisher, a bug) ends here as a
:class:`~runtrail.publisher.submitted.Submitted` with a reason, counted in ``rejected``.
"""

from __future__ import annotations

import logging

from runtrail.events import EventError
from runtrail.privacy.protect import ProtectFailed
from runtrail.publisher.metrics import PublisherMetrics
from runtrail.publisher.pipeline import Rejected
from runtrail.publisher.submitted import Submitted

#: the façade's logger: a filter on the publisher's log sees its rejections
log = logging.getLogger("runtrail.publisher.publisher")


class Rejections:
    """Counts and logs rejections (at WARNING, or DEBUG when ``log_rejections`` is off)."""

    def __init__(self, metrics: PublisherMetrics, log_rejections: bool) -> None:
        self._metrics = metrics
        self._level = logging.WARNING if log_rejections else logging.DEBUG

    def reject(self, reason: str, detail: str) -> Submitted:
        self._metrics.count("rejected")
        log.log(self._level, "event rejected (%s): %s", reason, detail)
        return Submitted(None, reason, detail)

    def of(self, exc: Exception) -> Submitted:
        """The rejection a failed step stands for; an unexpected one is logged in full."""
        if isinstance(exc, (EventError, Rejected)):
            return self.reject(exc.reason, str(exc))
        if isinstance(exc, ProtectFailed):
            return self.reject("protect-failed", str(exc))
        log.exception("unexpected error while publishing")
        return self.reject("internal-error", f"{type(exc).__name__}: {exc}")
