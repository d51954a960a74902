"""Whether a process runs, for the tools that start, stop and claim things for processes."""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process; an unreaped zombie counts as gone (it holds no port
    and does no work).

    Every thread is looked at, not the leader alone: when a JVM's main thread has exited
    during shutdown the leader already shows ``Z`` while other threads still run.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return True  # no procfs: trust kill(0)
    for task in tasks:
        try:
            stat = (task / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue  # that thread just ended
        fields = stat.rsplit(")", 1)[-1].split()
        if fields and fields[0] not in ("Z", "X"):
            return True
    return False
