"""``dev up`` never reports a live service as exited, and does report one that exited, with
the last lines of its log (issue 26: "audit exited while starting" 4 times in 12, while the
process ran: right after the spawn, its command line in procfs was not yet the one it execs).

The late exec is made certain by starting each service through ``sh -c 'sleep 1; exec …'``:
for that second the process's argv is the shell's, without the service's command line.
"""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from runtrail_tools.devstack import procs
from runtrail_tools.devstack.ports import find_free_base
from runtrail_tools.devstack.stack import DevStack, StackError, StackOptions
from tests.support import stack_settings


@pytest.fixture
def stack(kafka_bootstrap: str, tmp_path: Path) -> Iterator[DevStack]:
    """The noop service alone on the session's broker, on topics of its own."""
    prefix = f"starting-{uuid.uuid4().hex[:8]}"
    settings = stack_settings(
        kafka_bootstrap,
        tmp_path / "state",
        prefix,
        partitions=1,
    )
    options = StackOptions(
        port_base=find_free_base(["noop"]),
        services=["noop"],
        manage_broker=False,
        ui=False,
        group_prefix=prefix,
        ready_timeout=60,
    )
    dev = DevStack(settings, options, say=lambda line: None)
    try:
        yield dev
    finally:
        assert dev.down() == []


def spawn_through(
    monkeypatch: pytest.MonkeyPatch,
    wrap: Callable[[list[str]], list[str]],
    marker: Sequence[str] = (),
    seen: list[bool] | None = None,
) -> None:
    """Start every process of the stack as ``wrap(argv)``; ``seen`` gets, per process, whether
    its command line showed ``marker`` right after the spawn."""
    spawn = procs.spawn

    def wrapped(argv: Sequence[str], **kwargs: Any) -> Any:
        child = spawn(wrap(list(argv)), **kwargs)
        if seen is not None:
            seen.append(procs.runs(child.pid, marker))
        return child

    monkeypatch.setattr(procs, "spawn", wrapped)


def test_a_service_that_execs_late_is_waited_for(
    stack: DevStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []
    spawn_through(
        monkeypatch,
        lambda argv: ["sh", "-c", "sleep 1; exec " + shlex.join(argv)],
        stack.service_marker("noop"),
        seen,
    )
    state = stack.up()
    assert seen == [False]  # what the old check took for an exited process
    record = state.services["noop"]
    assert procs.runs(record.pid, stack.service_marker("noop"))  # the same pid, exec'd
    assert stack.running(state) == {"noop": True}


def test_a_service_that_exits_at_once_is_reported_with_its_log(
    stack: DevStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawn_through(monkeypatch, lambda argv: [*argv, "--no-such-flag"])
    with pytest.raises(StackError) as failed:
        stack.up()
    message = str(failed.value)
    assert "noop (pid " in message and ") exited while starting" in message, message
    assert "unrecognized arguments: --no-such-flag" in message, message  # its log's tail
