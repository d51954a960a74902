"""Failure recovery: the resume cache and the resumable decorators (seed 000 §3, seed 002).

A re-run after a crash skips the nodes that completed and repeats no side effect:

* :class:`ResumeCache` — content-addressed results (canonical prompt / tool name + arguments,
  sha256), scoped by tenant and run, with counters, ``save_json``/``load_json``;
* :class:`ResumableModelClient`, :class:`ResumableToolExecutor` — wrap the agent's clients;
* :class:`RunRecorder` — publishes the run's events for the decorators (intent before effect);
* :class:`ServiceCacheClient` (the resume-cache service over HTTP) and
  :class:`TopicCacheClient` (the compacted cache topic, no service) — shared, cross-process
  sources; :func:`resume_barrier` — read-your-writes across a crash.

Each name below is imported from its module on first use (:mod:`runtrail.lazy_exports`): a
reader of one part (the cache keys, the entries) does not load the clients and the recorder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtrail.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from runtrail.resume.cache import Counters, ResumeCache, ToolLookup
    from runtrail.resume.entry import CacheEntry, Intent, ModelResult, RunState
    from runtrail.resume.errors import CacheUnavailable, NotCaughtUp, OutcomeUnknown, ToolFailed
    from runtrail.resume.keys import Kind, Scope, idempotency_key, model_key, tool_key
    from runtrail.resume.model_client import ModelClient, ResumableModelClient, StreamingModelClient
    from runtrail.resume.persistence import CacheFileError, read_cache_file, write_cache_file
    from runtrail.resume.recorder import RunRecorder
    from runtrail.resume.remote import CacheSource, Lookup
    from runtrail.resume.tool_executor import (
        ReconcileHook,
        ResumableToolExecutor,
        ToolExecutor,
        ToolInvocation,
        ToolOutcome,
    )

__getattr__ = lazy_exports(
    __name__,
    {
        ".cache": ("Counters", "ResumeCache", "ToolLookup"),
        ".entry": ("CacheEntry", "Intent", "ModelResult", "RunState"),
        ".errors": ("CacheUnavailable", "NotCaughtUp", "OutcomeUnknown", "ToolFailed"),
        ".keys": ("Kind", "Scope", "idempotency_key", "model_key", "tool_key"),
        ".model_client": ("ModelClient", "ResumableModelClient", "StreamingModelClient"),
        ".persistence": ("CacheFileError", "read_cache_file", "write_cache_file"),
        ".recorder": ("RunRecorder",),
        ".remote": ("CacheSource", "Lookup"),
        ".tool_executor": (
            "ReconcileHook",
            "ResumableToolExecutor",
            "ToolExecutor",
            "ToolInvocation",
            "ToolOutcome",
        ),
    },
)

__all__ = [
    "CacheEntry",
    "CacheFileError",
    "CacheSource",
    "CacheUnavailable",
    "Counters",
    "Intent",
    "Kind",
    "Lookup",
    "ModelClient",
    "ModelResult",
    "NotCaughtUp",
    "OutcomeUnknown",
    "ReconcileHook",
    "ResumableModelClient",
    "ResumableToolExecutor",
    "ResumeCache",
    "RunRecorder",
    "RunState",
    "Scope",
    "StreamingModelClient",
    "ToolExecutor",
    "ToolFailed",
    "ToolInvocation",
    "ToolLookup",
    "ToolOutcome",
    "idempotency_key",
    "model_key",
    "read_cache_file",
    "tool_key",
    "write_cache_file",
]
