"""Free loopback ports come from outside the kernel's ephemeral range where it leaves room
(a broker restarted on its port must not race clients' outgoing connections for it), and from
the kernel where it does not, rather than failing."""

from __future__ import annotations

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
