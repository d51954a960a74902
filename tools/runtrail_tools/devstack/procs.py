"""Detached child processes that outlive ``dev up`` and are stopped, by pid, from ``dev down``.

Each process leads its own session (``start_new_session``), so a Ctrl-C in the shell that ran
``dev up`` does not reach it, and stopping it signals its whole group. A pid alone is never
trusted: the process must still run the command line it was started with (pid reuse).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from runtrail.files import open_private, private_dir
from runtrail_tools.pids import pid_alive

log = logging.getLogger(__name__)


def cmdline(pid: int) -> list[str] | None:
    """The process's argv, or None when it cannot be read (gone, or no procfs)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def runs(pid: int, marker: Sequence[str]) -> bool:
    """``pid`` is alive and its argv contains every string of ``marker`` (guards pid reuse)."""
    if not pid_alive(pid):
        return False
    argv = cmdline(pid)
    if argv is None:
        return not Path("/proc/self").exists()  # no procfs: trust the pid
    return all(m in argv for m in marker)


def spawn(
    argv: Sequence[str], *, env: Mapping[str, str], log_path: Path, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` detached, appending its stdout/stderr to ``log_path``.

    The handle is the only sure word on a child this process started: until the child has
    finished its exec, its argv in procfs can be its parent's or empty, so :func:`runs` may
    say no for a child that is alive and well.
    """
    private_dir(log_path.parent)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    with open_private(log_path, "ab") as out:
        out.write(f"--- runtrail dev: starting at {stamp}: {' '.join(argv)} ---\n".encode())
        out.flush()
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    return proc


def _signal_group(pid: int, signum: signal.Signals) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our child (started in this process)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        _reap(pid)
        if not pid_alive(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def stop(pid: int, *, marker: Sequence[str], timeout: float, name: str = "") -> str:
    """SIGTERM (a draining shutdown), then SIGKILL after ``timeout``. What happened:
    ``gone`` (it was not running), ``left alone`` (the pid runs something else now),
    ``stopped``, ``killed``; raises if SIGKILL fails too."""
    if not pid_alive(pid):
        return "gone"
    if not runs(pid, marker):
        argv = cmdline(pid)
        return f"left alone: pid {pid} now runs {' '.join(argv or ['?'])[:120]}"
    _signal_group(pid, signal.SIGTERM)
    if wait_gone(pid, timeout):
        return "stopped"
    log.warning("%s (pid %d) ignored SIGTERM for %.0fs: killing", name or "process", pid, timeout)
    _signal_group(pid, signal.SIGKILL)
    if wait_gone(pid, 10.0):
        return "killed"
    raise OSError(f"{name or 'process'} (pid {pid}) survived SIGKILL")
