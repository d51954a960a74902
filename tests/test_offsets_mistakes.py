"""``runtrail offsets`` given the wrong thing: a mistyped topic, the wrong group, a store that
cannot be opened. Each is an answer naming the mistake, and nothing on the broker or in the
store changes (docs/OPERATIONS.md, ``runtrail offsets``).

Everything runs through the real CLI in processes of their own, on the real broker and real
SQLite stores; the wrong-group case with a live ``runtrail run projector`` beside it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from runtrail.kafka.admin import admin_client
from runtrail.resume.partitioning import partition_for
from tests.support import create_topic, form, produce_forms, runtrail_cli, unique_topic, wait_for

pytestmark = [pytest.mark.kafka]

RUN = "run-mistakes"
PARTITIONS = 2
EVENTS = 6
PART = partition_for(RUN, PARTITIONS)


def _topics(bootstrap: str) -> set[str]:
    """Every topic on the broker (a listing of all topics names none, so creates none)."""
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def _env(bootstrap: str, topic: str, home: Path) -> dict[str, str]:
    return {
        "RUNTRAIL_BOOTSTRAP_SERVERS": bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": topic,
        "RUNTRAIL_DLQ_TOPIC": f"{topic}.dlq",
        "RUNTRAIL_STATE_DIR": str(home),
        "RUNTRAIL_COMMIT_INTERVAL_MS": "100",
        "RUNTRAIL_BATCH_TIMEOUT_MS": "100",
        "RUNTRAIL_AUTO_OFFSET_RESET": "earliest",
    }


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The command failed as a usage error: exit 2, one line on stderr, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = create_topic(kafka_bootstrap, unique_topic("offsets-mistakes"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{name}.dlq", partitions=PARTITIONS)
    produce_forms(
        kafka_bootstrap,
        name,
        [form("STEP_END", RUN, s, {"reason": None}, tenant="acme") for s in range(1, EVENTS + 1)],
    )
    return name


# --- a mistyped topic --------------------------------------------------------------------------


def test_a_lookup_never_creates_the_topic(kafka_bootstrap: str) -> None:
    """Every AdminClient runtrail makes: looking up a topic that does not exist says so."""
    typo = unique_topic("typo-lookup")
    described = (
        admin_client({"bootstrap.servers": kafka_bootstrap})
        .list_topics(typo, timeout=10)
        .topics.get(typo)
    )
    assert described is not None and described.error is not None  # UNKNOWN_TOPIC_OR_PART
    assert typo not in _topics(kafka_bootstrap)


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "projector", "--group", "G"],
        ["show", "noop", "--group", "G", "--json"],
        ["set", "noop", "--group", "G", "--to-earliest"],
        ["set", "projector", "--group", "G", "--to-offset", "0", "--dry-run"],
    ],
    ids=["show-projector", "show-noop-json", "set-noop", "set-projector-dry-run"],
)
def test_a_mistyped_topic_is_an_error_and_stays_absent(
    argv: list[str], kafka_bootstrap: str, tmp_path: Path
) -> None:
    typo = unique_topic("walk1-evnts")
    env = _env(kafka_bootstrap, typo, tmp_path)
    for _ in range(2):  # the second time too: the first created nothing to find
        line = _one_line_error(runtrail_cli(env, "offsets", *argv))
        assert f"topic {typo!r} does not exist" in line
        assert typo not in _topics(kafka_bootstrap)


# --- the wrong group ---------------------------------------------------------------------------


def _offsets(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return runtrail_cli(env, "offsets", *argv, timeout=60)


def _show(env: dict[str, str], store: str, group: str) -> dict[int, dict[str, Any]]:
    result = _offsets(env, "show", "projector", "--group", group, "--json", f"-ostore_url={store}")
    assert result.returncode == 0, result.stderr
    return {row["partition"]: row for row in json.loads(result.stdout)["partitions"]}


@pytest.fixture
def live_projector(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``runtrail run projector --group <right>`` on ``topic``, its store under tmp_path."""
    log = (tmp_path / "projector.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable, "-m", "runtrail_tools.cli.main", "run", "projector",
            "--group", f"right-{topic}", "--metrics-port", "0",
            "-o", f"store_url=sqlite:///{tmp_path / 'projection.db'}",
        ],
        stdout=log,
        stderr=log,
        env={**os.environ, **_env(kafka_bootstrap, topic, tmp_path)},
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
        log.close()


def test_set_with_the_wrong_group_is_refused_and_moves_nothing(
    kafka_bootstrap: str,
    topic: str,
    tmp_path: Path,
    live_projector: subprocess.Popen[bytes],
) -> None:
    env = _env(kafka_bootstrap, topic, tmp_path)
    store = f"sqlite:///{tmp_path / 'projection.db'}"
    right, wrong = f"right-{topic}", f"wrong-{topic}"

    def caught_up() -> bool:
        if not (tmp_path / "projection.db").is_file():
            return False
        row = _show(env, store, right)[PART]
        return row["store"] == EVENTS and row["group"] == EVENTS

    wait_for(caught_up, 60, what="the live projector's store and group at the log end")

    # the operator names another group: it has no members, so the member check passes
    for extra in (["--dry-run"], []):
        result = _offsets(
            env, "set", "projector", "--group", wrong, "--partition", str(PART),
            "--to-offset", "2", f"-ostore_url={store}", *extra,
        )  # fmt: skip
        assert result.returncode == 1, (result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        assert "refused" in result.stderr and repr(wrong) in result.stderr
        assert "no committed offset" in result.stderr and "--new-group" in result.stderr
        assert "moved" not in result.stdout

    shown = _show(env, store, wrong)
    assert shown[PART]["store"] == EVENTS  # the store did not move
    assert shown[PART]["group"] is None  # nor did the wrong group's offsets
    warned = _offsets(env, "show", "projector", "--group", wrong, f"-ostore_url={store}")
    assert warned.returncode == 0 and "warning" in warned.stderr and wrong in warned.stderr

    # stopped, the store is still where the service left it, and the right group moves it
    live_projector.send_signal(signal.SIGTERM)
    assert live_projector.wait(30) == 0
    assert _show(env, store, right)[PART]["store"] == EVENTS
    result = _offsets(
        env, "set", "projector", "--group", right, "--partition", str(PART),
        "--to-offset", "2", f"-ostore_url={store}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _show(env, store, right)[PART]["store"] == 2

    # a group new to this store (or whose offsets expired) can take it, when said so
    result = _offsets(
        env, "set", "projector", "--group", wrong, "--partition", str(PART),
        "--to-offset", "3", f"-ostore_url={store}", "--new-group",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    shown = _show(env, store, wrong)
    assert shown[PART]["store"] == 3 and shown[PART]["group"] == 3


# --- a store that cannot be opened -------------------------------------------------------------


@pytest.mark.parametrize("action", ["show", "set"])
def test_an_unreachable_store_is_one_line(
    action: str, kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    env = _env(kafka_bootstrap, topic, tmp_path)
    url = "postgresql://u:secret-pw@127.0.0.1:1/x"
    argv = ["offsets", action, "projector", f"-ostore_url={url}"]
    if action == "set":
        argv += ["--to-earliest"]
    line = _one_line_error(runtrail_cli(env, *argv))
    assert "projector store postgresql://u:" in line and "127.0.0.1:1/x" in line
    assert "secret-pw" not in line


def test_a_locked_store_is_one_line(kafka_bootstrap: str, topic: str, tmp_path: Path) -> None:
    env = _env(kafka_bootstrap, topic, tmp_path)
    path = tmp_path / "projection.db"
    store = f"sqlite:///{path}"
    made = runtrail_cli(env, "offsets", "show", "projector", f"-ostore_url={store}")
    assert made.returncode == 2 and "no projector store" in made.stderr  # never made up
    from runtrail.persistence.kinds import PROJECTIONS
    from runtrail.persistence.registry import open_store

    open_store(PROJECTIONS, store).close()  # the store the service would have made
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")  # another process in the middle of a write
        # the store waits out its busy timeout (10 s), then says which store is locked
        result = runtrail_cli(
            env, "offsets", "set", "projector", f"-ostore_url={store}", "--to-earliest"
        )
        line = _one_line_error(result)
        assert "database is locked" in line and str(path) in line
    finally:
        holder.rollback()
        holder.close()
    assert _show(env, store, "runtrail.projector")[PART]["store"] is None  # nothing written
