"""Retention the sessions service applies, beside its snapshots, to the content store and to
the LangGraph checkpoints.

Why this service owns both: neither store has a service of its own. The checkpoints are a
sessions-side store (beside the snapshots, in the session store by default). The content
store is written by publishers (agents, with no loop of their own) and read by several
services; pruning it from one owner lists it once per interval, not once per reader, and the
sessions service already applies retention to agent state. The passes are those of ``runtrail
prune`` (:mod:`runtrail.privacy.retention`), on the service's timer
(:mod:`runtrail.privacy.retention_policy`).
"""

from __future__ import annotations

import logging

from runtrail.config import Settings
from runtrail.persistence import open_store
from runtrail.persistence.kinds import LANGGRAPH_CHECKPOINTS, PROTECTED_CONTENT
from runtrail.privacy.retention import prune_content, prune_every_tenants_checkpoints
from runtrail.privacy.retention_policy import RetentionTimer, checkpoints_timer, retention_timer

log = logging.getLogger(__name__)


def owned_timers(settings: Settings, checkpoints_url: str) -> list[RetentionTimer]:
    """The timers of the content store and of the checkpoints at ``checkpoints_url`` that the
    policy names."""
    timers = []
    content = retention_timer(settings, "content", lambda cutoff: _prune_content(settings, cutoff))
    if content is not None and not settings.content_store_url:
        log.warning("retention: the policy names content, but no content store is configured")
    elif content is not None:
        timers.append(content)
    checkpoints = checkpoints_timer(
        settings, lambda keep: _prune_checkpoints(checkpoints_url, keep)
    )
    if checkpoints is not None:
        timers.append(checkpoints)
    return timers


def _prune_content(settings: Settings, cutoff_s: float) -> int:
    store = open_store(PROTECTED_CONTENT, str(settings.content_store_url))
    try:
        return prune_content(store, cutoff_s)
    finally:
        store.close()


def _prune_checkpoints(url: str, keep: int) -> int:
    backend = open_store(LANGGRAPH_CHECKPOINTS, url)
    try:
        return prune_every_tenants_checkpoints(backend, keep)
    finally:
        backend.close()
