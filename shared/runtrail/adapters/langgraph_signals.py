"""What LangGraph's control flow looks like from a callback: an interrupt, a resume, time travel.

Read by duck typing (class names and attributes), so the LangChain adapter works without
LangGraph installed and with any LangGraph that keeps these shapes:

* ``interrupt()`` raises ``GraphInterrupt`` (a ``GraphBubbleUp``) whose first argument holds
  the ``Interrupt`` objects (``id``, ``value``); the graph ends normally with them under
  ``__interrupt__`` in its output;
* a resume is a root run whose input is ``Command(resume=...)``;
* a time-travel replay or fork is a root run configured with a ``checkpoint_id`` (LangChain
  copies the configurable's scalars into the callbacks' metadata).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: (interrupt id, interrupt value)
Interrupt = tuple[str, Any]


def _interrupt(item: Any) -> Interrupt | None:
    ident = getattr(item, "id", None)
    if ident is None or not hasattr(item, "value"):
        return None
    return str(ident), item.value


def _interrupts(items: Any) -> list[Interrupt]:
    if not isinstance(items, Iterable) or isinstance(items, (str, bytes, Mapping)):
        return []
    return [found for found in map(_interrupt, items) if found is not None]


def raised_interrupts(error: BaseException) -> list[Interrupt]:
    """The interrupts a ``GraphInterrupt`` carries (none for any other exception)."""
    if not any(cls.__name__ == "GraphInterrupt" for cls in type(error).__mro__):
        return []
    return _interrupts(error.args[0]) if error.args else []


def returned_interrupts(output: Any) -> list[Interrupt]:
    """The interrupts a graph's output reports under ``__interrupt__``."""
    if not isinstance(output, Mapping):
        return []
    return _interrupts(output.get("__interrupt__"))


def resume_of(inputs: Any) -> tuple[bool, Any]:
    """Whether a root run's input resumes an interrupt (``Command(resume=...)``), and the value."""
    if type(inputs).__name__ != "Command":
        return False, None
    value = getattr(inputs, "resume", None)
    return value is not None, value


def checkpoint_address(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """The saved state a root run starts from when it names one (time travel), else None; in
    LangGraph's names (``thread_id``, ``checkpoint_ns``, ``checkpoint_id``)."""
    if metadata.get("checkpoint_id") is None:
        return None
    return {
        "thread_id": metadata.get("thread_id"),
        "checkpoint_ns": metadata.get("checkpoint_ns") or "",
        "checkpoint_id": metadata["checkpoint_id"],
    }
