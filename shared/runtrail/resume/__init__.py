"""Failure recovery: the resume cache and the resumable decorators (seed 000 §3, seed 002).

A re-run after a crash skips the nodes that completed and repeats no side effect:

* :class:`ResumeCache` — content-addressed results (canonical prompt / tool name + arguments,
  sha256), scoped by tenant and run, with counters, ``save_json``/``load_json``;
* :class:`ResumableModelClient`, :class:`ResumableToolExecutor` — wrap the agent's clients;
* :class:`RunRecorder` — publishes the run's events for the decorators (intent before effect);
* :class:`ServiceCacheClient` (the resume-cache service over HTTP) and
  :class:`TopicCacheClient` (the compacted cache topic, no service) — shared, cross-process
  sources; :func:`resume_barrier` — read-your-writes across a crash.
"""

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
