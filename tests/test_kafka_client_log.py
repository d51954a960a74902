"""librdkafka's log lines go through ``logging``, one line per condition (issue 26).

Before, a client without a ``logger`` wrote raw ``%3|…|FAIL|…`` lines to stderr, several a
second while the broker was down: ``runtrail audit tree-head`` printed about 70 in its 10 s.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

from runtrail.config import Settings
from runtrail.kafka.client_log import CLIENT_LOGGER, RateLimit, client_logger
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail_tools.kafka.ports import free_ports

RUNTRAIL = Path(sys.executable).parent / "runtrail"


def refused(port: int, after_ms: int, its_suppressed: int = 0) -> tuple[str, str, str]:
    """A failed connect as librdkafka logs it (facility, client name, message); with
    ``its_suppressed``, as librdkafka logs it after holding back that many repeats itself."""
    held = f", {its_suppressed} identical error(s) suppressed" if its_suppressed else ""
    message = (
        f"[thrd:127.0.0.1:{port}/bootstrap]: 127.0.0.1:{port}/bootstrap: Connect to "
        f"ipv4#127.0.0.1:{port} failed: Connection refused (after {after_ms}ms in state "
        f"CONNECT{held})"
    )
    return "FAIL", "runtrail-audit-1#producer-1", message


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def logged(limit: RateLimit, *lines: tuple[str, str, str]) -> list[str]:
    """What passes ``limit`` of ``lines`` logged as confluent-kafka logs them."""
    logger = logging.Logger("test.client_log")
    logger.addFilter(limit)
    handler = Kept()
    logger.addHandler(handler)
    for line in lines:
        logger.log(logging.ERROR, "%s [%s] %s", *line)
    return [r.getMessage() for r in handler.records]


def test_a_repeated_condition_is_one_line_then_a_count_of_what_was_held_back() -> None:
    clock = Clock()
    limit = RateLimit(window=30.0, clock=clock)
    # the same failure, however its timings and ports vary, is one condition
    # and so is librdkafka's own repeat of it after it held some back
    first = logged(
        limit, refused(1, 0), refused(1, 3), refused(2, 0), refused(1, 12), refused(1, 0, 1)
    )
    assert first == [
        "runtrail-audit-1#producer-1: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 "
        "failed: Connection refused (after 0ms in state CONNECT) (FAIL)"
    ]
    clock.now += 29.0
    assert logged(limit, refused(1, 0)) == []  # still in the window
    clock.now += 2.0
    [after] = logged(limit, refused(1, 5))
    assert after.endswith("[5 similar line(s) suppressed since the last one shown]"), after
    assert "[thrd:" not in after
    clock.now += 31.0
    [again] = logged(limit, refused(1, 5))
    assert "suppressed" not in again  # nothing was held back since


def test_different_conditions_are_each_shown() -> None:
    limit = RateLimit(window=30.0, clock=Clock())
    shown = logged(
        limit,
        refused(1, 0),
        ("FAIL", "c#producer-1", "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: "
         "Connection timed out"),
        ("ERROR", "c#producer-1", "1/1 brokers are down"),
        ("FAIL", "c#producer-1", "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: "
         "Connection timed out"),
        ("ERROR", "c#producer-1", "2/2 brokers are down"),
    )  # fmt: skip
    assert len(shown) == 3, shown
    assert [line.rsplit(" (", 1)[1] for line in shown] == ["FAIL)", "FAIL)", "ERROR)"]


def test_every_client_config_gets_the_logger_unless_given_one() -> None:
    settings = Settings(kafka_options={"client.id": "x"})
    config = settings.kafka_config(**{"group.id": "g"})
    assert config["logger"] is client_logger() is logging.getLogger(CLIENT_LOGGER)
    assert sum(isinstance(f, RateLimit) for f in config["logger"].filters) == 1
    own = logging.getLogger("test.own")
    assert settings.kafka_config(logger=own)["logger"] is own
    assert "logger" not in settings.kafka_options  # what is serialised stays plain


def test_audit_tree_head_with_the_broker_down_logs_one_readable_line_not_a_flood(
    tmp_path: Path,
) -> None:
    """The command waits 10 s for the tree head's acknowledgement, trying to connect all
    along: one line says so, no raw librdkafka line reaches stderr."""
    (port,) = free_ports(1)  # nothing listens there
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTRAIL_")}
    state = tmp_path / "state"
    state.mkdir()  # the audit service's store (tree-head signs in a store that exists)
    open_store(AUDIT_LINKS, sqlite_url(state / "audit.db")).close()
    done = subprocess.run(
        [
            str(RUNTRAIL), "audit", "tree-head",
            "--state-dir", str(tmp_path / "state"),
            "--bootstrap-servers", f"127.0.0.1:{port}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    lines = done.stderr.splitlines()
    assert not [line for line in lines if re.match(r"%\d+\|", line)], done.stderr
    refusals = [line for line in lines if "Connection refused" in line]
    assert len(refusals) == 1, done.stderr
    assert f" ERROR {CLIENT_LOGGER}: " in refusals[0]
    assert len(lines) <= 5, done.stderr
    # the command itself still says what happened: kept in the store, not published
    assert done.returncode == 1, done.stderr
    assert "not published" in done.stderr
