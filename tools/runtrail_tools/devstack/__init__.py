"""The local stack: the broker, the topics and every registered service as its own process.

``runtrail dev up|down|status`` is a thin CLI over :class:`~runtrail_tools.devstack.stack.DevStack`;
the demo and the end-to-end tests drive the same class, so what a developer runs is what the
tests check. Layout under ``<state_dir>/dev/``: ``stack.json`` (what was started, where),
``<service>.pid`` and ``logs/<service>.log`` per process.

Each name below is imported from its module on first use (:mod:`runtrail.lazy_exports`): a
reader of the state folder (the run explorer) does not load the broker's tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtrail.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from runtrail_tools.devstack.ports import DEFAULT_BASE, PortPlan, plan_ports
    from runtrail_tools.devstack.stack import DevStack, StackError
    from runtrail_tools.devstack.state import ProcessRecord, StackState

__getattr__ = lazy_exports(
    __name__,
    {
        ".ports": ("DEFAULT_BASE", "PortPlan", "plan_ports"),
        ".stack": ("DevStack", "StackError"),
        ".state": ("ProcessRecord", "StackState"),
    },
)

__all__ = [
    "DEFAULT_BASE",
    "DevStack",
    "PortPlan",
    "ProcessRecord",
    "StackError",
    "StackState",
    "plan_ports",
]
