"""The retention policy the services apply to the stores they own, and when they apply it.

Why a timer on the service's own loop: the pruning functions (:mod:`runtrail.privacy.retention`)
are those ``runtrail prune`` runs, so a store is pruned the same way by hand or by its service;
running them on the consume loop (once per ``retention_interval_s``, first at start) keeps one
writer per store at a time, as the services' stores expect. A pass that fails is logged and
tried again at the next interval: retention never stops a service from consuming.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from runtrail.config import Settings
from runtrail.privacy.prune_log import record_prune

log = logging.getLogger(__name__)

T = TypeVar("T")

DAY_S = 86_400
#: the stores a service prunes by age, as named in the policy
STORES = ("capture", "sessions", "resumeCache", "content")
#: the store kept by count, the latest N checkpoints of every thread: ``{"keepLatest": N}``
CHECKPOINTS = "checkpoints"

#: Prunes one store: given the cutoff (epoch seconds), how many units it deleted.
Prune = Callable[[float], int]


def _setting(
    policy: Mapping[str, Any], store: str, name: str, convert: Callable[[Any], T]
) -> T | None:
    """``store``'s one setting ``{name: N}`` as ``convert`` reads it; None when the policy has
    no entry for the store (it keeps it all)."""
    entry = policy.get(store)
    if entry is None:
        return None
    if not isinstance(entry, Mapping) or name not in entry:
        raise ValueError(f"retention policy of {store}: expected {{{name!r}: N}}")
    return convert(entry[name])


def older_than_days(policy: Mapping[str, Any], store: str) -> float | None:
    """The store's age limit in days; None when the policy keeps it for ever."""
    if store not in STORES:
        raise ValueError(f"no retention for {store!r}: the stores are {', '.join(STORES)}")
    days = _setting(policy, store, "olderThanDays", float)
    if days is not None and days <= 0:
        raise ValueError(f"retention policy of {store}: olderThanDays must be positive")
    return days


def keep_latest_checkpoints(policy: Mapping[str, Any]) -> int | None:
    """How many checkpoints of each thread the policy keeps; None when it keeps them all."""
    keep = _setting(policy, CHECKPOINTS, "keepLatest", int)
    if keep is not None and keep < 1:
        raise ValueError(f"retention policy of {CHECKPOINTS}: keepLatest must be at least 1")
    return keep


class RetentionTimer:
    """Applies one store's age limit every ``interval_s``, from :meth:`tick`."""

    def __init__(
        self,
        store: str,
        days: float,
        interval_s: float,
        prune: Prune,
        record: Callable[[str, float, int], None] | None = None,
    ) -> None:
        self.store = store
        #: appends a pass that deleted something to the prune log
        self.record = record
        self.days = days
        self.interval_ms = int(interval_s * 1000)
        self.prune = prune
        self._next_ms = 0
        #: units deleted by every pass so far
        self.deleted = 0

    def tick(self, now_ms: int) -> None:
        """Prune when due (the service's ``tick``)."""
        if now_ms < self._next_ms:
            return
        self._next_ms = now_ms + self.interval_ms
        cutoff = now_ms / 1000 - self.days * DAY_S
        started = time.monotonic()
        try:
            deleted = self.prune(cutoff)
            if deleted and self.record is not None:
                self.record(self.store, cutoff, deleted)
        except Exception:
            log.exception(
                "retention of %s failed; tried again in %ss", self.store, self.interval_ms // 1000
            )
            return
        self.deleted += deleted
        if deleted:
            log.info(
                "retention of %s: %d pruned in %.2fs",
                self.store,
                deleted,
                time.monotonic() - started,
            )


def retention_timer(settings: Settings, store: str, prune: Prune) -> RetentionTimer | None:
    """The timer of ``store`` under the settings' policy; None when the policy keeps it."""
    days = older_than_days(settings.retention_policy, store)
    if days is None:
        return None
    log.info(
        "retention: %s keeps %g days, applied every %gs", store, days, settings.retention_interval_s
    )
    return RetentionTimer(
        store,
        days,
        settings.retention_interval_s,
        prune,
        lambda name, cutoff_s, deleted: record_prune(settings, name, cutoff_s, deleted),
    )


def checkpoints_timer(settings: Settings, prune: Callable[[int], int]) -> RetentionTimer | None:
    """The timer keeping the latest N checkpoints of every thread, ``prune(N)`` (how many
    threads it pruned); None when the policy keeps them all. A pass deletes by count, not
    age, so it is not written to the prune log (whose rows say "older than a cutoff")."""
    keep = keep_latest_checkpoints(settings.retention_policy)
    if keep is None:
        return None
    log.info(
        "retention: %s keeps the latest %d of each thread, applied every %gs",
        CHECKPOINTS,
        keep,
        settings.retention_interval_s,
    )
    return RetentionTimer(CHECKPOINTS, 0, settings.retention_interval_s, lambda _: prune(keep))
