"""Free loopback ports come from outside the kernel's ephemeral range where it leaves room
(a broker restarted on its port must not race clients' outgoing connections for it), and from
the kernel where it does not, rather than failing."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from runtrail_tools.kafka import ports
from runtrail_tools.kafka.ports import free_ports


@pytest.mark.parametrize(
    ("ephemeral", "lowest", "highest"),
    [
        ((32768, 60999), 10000, 32767),  # Linux's default: below the range
        ((1024, 60999), 61000, 65535),  # the range starts low: above it
        ((1024, 65535), 1, 65535),  # no room outside: the kernel's choice
    ],
)
def test_ports_are_picked_outside_the_ephemeral_range_where_it_leaves_room(
    monkeypatch: pytest.MonkeyPatch, ephemeral: tuple[int, int], lowest: int, highest: int
) -> None:
    monkeypatch.setattr(ports, "_ephemeral_range", lambda: ephemeral)
    picked = free_ports(3)
    assert len(set(picked)) == 3
    assert all(lowest <= port <= highest for port in picked), picked
    assert all(ports.port_bindable(port) for port in picked)


def test_a_port_handed_to_a_running_process_is_not_handed_out_again_while_it_is_free(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A broker killed for a fault test frees its port; another test's picker must not take
    it, or the broker cannot come back (a CI failure: 'port … is already in use')."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    other = subprocess.Popen(
        [sys.executable, "-c", PICK_AND_WAIT],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(tmp_path),
    )
    try:
        assert other.stdout is not None
        held = int(other.stdout.readline())
        assert ports.port_bindable(held)  # free: nothing listens on it
        monkeypatch.setattr(ports, "_outside_ephemeral", lambda: range(held, held + 2))
        assert free_ports(1) == [held + 1]
        # both are held now: the other process's, and the one this process was handed
        with pytest.raises(OSError, match=f"no 1 free ports on 127.0.0.1 in {held}-{held + 1}"):
            free_ports(1)
    finally:
        other.kill()
        other.wait()
    # its process gone, its port is free to pick again
    assert free_ports(1) == [held]


PICK_AND_WAIT = """
import sys, time
from runtrail_tools.kafka import ports
print(ports.free_ports(1)[0], flush=True)
time.sleep(60)
"""


def child_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp_path)}
