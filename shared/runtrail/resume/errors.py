"""Errors of the resume layer. Only the two a caller must act on ever reach the agent.

Lookup failures are never raised into the agent: a cache that cannot be reached degrades to a
real call (counted and logged) — except where that call could repeat a side effect already
taken, which is :class:`OutcomeUnknown`.
"""

from __future__ import annotations


class CacheUnavailable(Exception):
    """A remote cache could not answer (unreachable, refused, or not caught up in time).

    Internal to the lookup path: the cache turns it into an untrusted miss.
    """


class NotCaughtUp(CacheUnavailable):
    """The service had not consumed as far as the lookup required within the timeout."""


class OutcomeUnknown(RuntimeError):
    """A tool call may already have taken effect, and nothing says how it ended.

    Raised instead of executing a non-idempotent tool again: the run's TOOL_CALL (the intent)
    was recorded but no TOOL_RESULT (the outcome), or the cache that would say so cannot be
    reached. Supply the outcome with the executor's ``reconcile`` hook to continue.
    """

    def __init__(
        self,
        *,
        run_id: str,
        step: int | None,
        call_id: str | None,
        tool_name: str | None,
        reason: str,
    ) -> None:
        self.run_id = run_id
        self.step = step
        self.call_id = call_id
        self.tool_name = tool_name
        self.reason = reason
        super().__init__(
            f"outcome unknown: run {run_id!r}, step {step}, call {call_id!r} "
            f"(tool {tool_name!r}): {reason}; it is not executed again because it is not "
            "declared idempotent — reconcile it (the executor's reconcile hook) to continue"
        )


class ToolFailed(RuntimeError):
    """A reconciled outcome says the tool call failed (its ``error`` is the message)."""

    def __init__(self, tool_name: str | None, call_id: str | None, error: str) -> None:
        self.tool_name = tool_name
        self.call_id = call_id
        self.error = error
        super().__init__(f"tool {tool_name!r} call {call_id!r} failed: {error}")
