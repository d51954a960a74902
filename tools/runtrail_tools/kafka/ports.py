"""Loopback port helpers for the local broker and the test fixtures."""

from __future__ import annotations

import socket
import time

LOOPBACK = "127.0.0.1"


def free_ports(count: int = 1) -> list[int]:
    """``count`` distinct ports that were free on 127.0.0.1 a moment ago.

    All sockets stay bound until every port is picked, so the ports differ from each other.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [int(s.getsockname()[1]) for s in sockets]
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
