"""``runtrail run SERVICE …`` with a broken handler, as a bad deploy would ship it.

``python -m tests.broken_handler run SERVICE …`` (``ServiceProcess(main_module=…)``) runs the
real CLI and the real service, with the service's ``process()`` wrapped so that it raises
before touching anything: for every event (``RUNTRAIL_TEST_BROKEN=all``) or for the events
of runs whose ID starts with ``poison`` (``RUNTRAIL_TEST_BROKEN=poison``). Everything else
(runtime, commits, stores, dead letters) is the shipped code.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from runtrail.runtime import Delivered
from runtrail.runtime.registry import service_class
from runtrail_tools.cli.main import main

BROKEN_ENV = "RUNTRAIL_TEST_BROKEN"


class BadDeploy(RuntimeError):
    """What the broken handler raises."""


def break_service(name: str, mode: str) -> None:
    cls = service_class(name)
    process = cls.process

    def broken(self: Any, batch: Sequence[Delivered]) -> None:
        for d in batch:
            if mode == "all" or d.event.run_id.startswith("poison"):
                raise BadDeploy(f"cannot handle {d.event.run_id}#{d.event.sequence}")
        process(self, batch)

    cls.process = broken  # type: ignore[method-assign]


if __name__ == "__main__":
    args = sys.argv[1:]
    break_service(args[args.index("run") + 1], os.environ.get(BROKEN_ENV, "all"))
    sys.exit(main(args))
