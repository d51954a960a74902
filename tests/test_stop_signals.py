"""A service told to stop while it is still starting stops cleanly (exit 0), instead of dying of
Python's default SIGTERM: supervisors (the dev stack, Kubernetes, tests) send SIGTERM whenever
they like, and CI saw a service killed with -15 a moment after it was started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from runtrail.runtime import stop_signals
from tests.kafka_fixture import TopicFactory
from tests.support import catches_sigterm


def test_a_signal_held_since_start_up_stops_the_process_once_it_can_stop() -> None:
    before = {s: signal.getsignal(s) for s in stop_signals.STOP_SIGNALS}
    stopped: list[bool] = []
    try:
        stop_signals.hold()
        os.kill(os.getpid(), signal.SIGTERM)
        assert not stopped
        stop_signals.install("test", lambda: stopped.append(True))
        assert stopped == [True]
        os.kill(os.getpid(), signal.SIGINT)  # and later signals reach the stop directly
        assert stopped == [True, True]
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


@pytest.mark.kafka
def test_sigterm_while_the_service_imports_still_exits_0(
    kafka_bootstrap: str, kafka_topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = kafka_topic_factory(1)
    log = tmp_path / "svc.log"
    with open(log, "wb") as out:
        proc = _noop(kafka_bootstrap, topic, tmp_path, out)
        try:
            deadline = time.monotonic() + 30
            while not catches_sigterm(proc.pid):  # the earliest moment it listens
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.001)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
    assert "signal 15 during start-up, stopping" in log.read_text()


@pytest.mark.kafka
def test_a_service_that_crashes_leaves_every_threads_stack_in_its_log(
    kafka_bootstrap: str, kafka_topic_factory: TopicFactory, tmp_path: Path
) -> None:
    """A crash in compiled code (librdkafka, the extension) ends a service with a signal; its
    log then holds the Python stack of each thread (``faulthandler``), not just a -11."""
    topic = kafka_topic_factory(1)
    log = tmp_path / "svc.log"
    with open(log, "wb") as out:
        proc = _noop(kafka_bootstrap, topic, tmp_path, out)
        try:
            deadline = time.monotonic() + 60
            while b"consuming" not in log.read_bytes():  # the runner's threads are up
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            proc.send_signal(signal.SIGSEGV)
            assert proc.wait(30) == -signal.SIGSEGV
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = log.read_text()
    assert "Fatal Python error: Segmentation fault" in text, text[-3000:]
    assert "Current thread" in text and "in run" in text, text[-3000:]


def _noop(bootstrap: str, topic: str, tmp_path: Path, out: IO[bytes]) -> subprocess.Popen[bytes]:
    """``runtrail run noop`` on ``topic``, its output and log to ``out``."""
    return subprocess.Popen(
        [
            sys.executable, "-m", "runtrail_tools.cli.main", "run", "noop",
            "--group", f"g-{topic}", "--bootstrap-servers", bootstrap,
            "--events-topic", topic, "--metrics-port", "0", "-v",
            "-o", f"output={tmp_path / 'noop.out'}",
        ],
        stdout=out,
        stderr=out,
    )  # fmt: skip
