"""Loopback port helpers for the local broker and the test fixtures."""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runtrail_tools.pids import pid_alive

LOOPBACK = "127.0.0.1"


#: the ports picked from when the kernel's ephemeral range is unknown (its usual start is 32768)
_BELOW_EPHEMERAL = (10000, 32768)
#: the fewest ports a range outside the ephemeral one must hold to be picked from
_ENOUGH = 1000


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _BELOW_EPHEMERAL[1], 65535


def _outside_ephemeral() -> range | None:
    """Ports to pick from outside the kernel's ephemeral range: below it (from 10000), else
    above it; None when neither side holds enough of them."""
    low, high = _ephemeral_range()
    below = range(_BELOW_EPHEMERAL[0], min(low, _BELOW_EPHEMERAL[1]))
    if len(below) >= _ENOUGH:
        return below
    above = range(high + 1, 65536)
    return above if len(above) >= _ENOUGH else None


def _claims_dir() -> Path:
    """Where the ports handed out are claimed, one file per port holding the picker's PID;
    shared by every process of this user with this temporary directory."""
    path = Path(tempfile.gettempdir()) / f"runtrail-ports-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


@contextmanager
def _claims_locked() -> Iterator[Path]:
    """The claims directory, with every other picker waiting until this one is done."""
    path = _claims_dir()
    with open(path / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield path
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _held(claim: Path) -> bool:
    """Whether the process that claimed this port still runs (this one included)."""
    try:
        pid = int(claim.read_text())
    except (OSError, ValueError):
        return False
    return pid_alive(pid)


def free_ports(count: int = 1) -> list[int]:
    """``count`` distinct ports that were free on 127.0.0.1 a moment ago, below the kernel's
    ephemeral range, and that no running process was handed out before.

    Why below it: a broker restarted on its port after a kill would otherwise race every
    client's outgoing connection for it, and a client that connects to a port of that range
    while nothing listens there can be given that very port as its own (a TCP self-connect),
    which then holds it. Where the ephemeral range leaves too few ports on either side, the
    kernel picks them (from that range, with its race). All sockets stay bound until every port
    is picked, so the ports differ from each other.

    Why claimed: a port is free while the broker on it is down (killed for a fault test, or
    stopped for a restart), and another picker would take it then; the broker could not come
    back. A port stays claimed, so out of every later pick, while the process it was handed
    to runs.
    """
    pool = _outside_ephemeral()
    sockets: list[socket.socket] = []
    with _claims_locked() as claims:
        try:
            for _ in range(1000):
                if len(sockets) == count:
                    break
                candidate = 0 if pool is None else random.choice(pool)
                if candidate and _held(claims / str(candidate)):
                    continue
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    sock.bind((LOOPBACK, candidate))
                except OSError:
                    sock.close()
                    continue
                if not candidate and _held(claims / str(sock.getsockname()[1])):
                    sock.close()
                    continue
                sockets.append(sock)
            if len(sockets) < count:
                where = "" if pool is None else f" in {pool.start}-{pool.stop - 1}"
                raise OSError(f"no {count} free ports on {LOOPBACK}{where}")
            picked = [int(s.getsockname()[1]) for s in sockets]
            for port in picked:
                (claims / str(port)).write_text(str(os.getpid()))
            return picked
        finally:
            for sock in sockets:
                sock.close()


def port_accepts(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port`` right now."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_bindable(port: int, host: str = LOOPBACK) -> bool:
    """Whether a server could listen on ``host:port`` now (nothing else holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def wait_port_closed(port: int, timeout: float, host: str = LOOPBACK) -> bool:
    """Wait until nothing accepts on ``host:port``; False if it still does at ``timeout``."""
    deadline = time.monotonic() + timeout
    while port_accepts(port, host):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True
