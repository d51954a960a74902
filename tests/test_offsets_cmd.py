"""``runtrail offsets show|set SERVICE`` against the real broker (issue 11 item 5).

For audit, projector and resume-cache the positions that count are the ones in their own store
(they seek there on assignment); for noop (and capture, sessions) the group's. Each test runs
the real service class in the real runtime and records the offsets it is handed: after
``set --to-offset k+1`` the first is k+1, after a rewind the first is the rewound offset.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.resume.partitioning import partition_for
from runtrail.runtime import Delivered
from runtrail.runtime.registry import service_class
from runtrail.runtime.runner import ServiceRunner
from runtrail_tools.cli.main import main
from runtrail_tools.offsets.group import Broker
from tests.support import create_topic, form, produce_forms, unique_topic, wait_for

pytestmark = [pytest.mark.kafka]

RUN = "run-poison"
PARTITIONS = 2
EVENTS = 6
POISON = 2  # the offset an operator wants to skip


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = create_topic(kafka_bootstrap, unique_topic("offsets"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{name}.dlq", partitions=PARTITIONS)
    produce_forms(
        kafka_bootstrap,
        name,
        [form("STEP_END", RUN, s, {"reason": None}, tenant="acme") for s in range(1, EVENTS + 1)],
    )
    return name


PART = partition_for(RUN, PARTITIONS)


def _options(service: str, home: Path) -> dict[str, str]:
    if service == "audit":
        return {
            "store_url": f"sqlite:///{home / 'audit.db'}",
            "publish": "false",
            "tree_head_interval_s": "0",
        }
    if service == "projector":
        return {"store_url": f"sqlite:///{home / 'projection.db'}"}
    if service == "resume-cache":
        return {
            "store_url": f"sqlite:///{home / 'cache.db'}",
            "http_port": "0",
            "publish_topic": "false",
        }
    if service == "capture":
        return {"sink_url": f"file://{home / 'capture'}"}
    return {}


STORELESS = ("noop", "capture")


class Run:
    """The real service class in the real runtime, on a thread, recording the offsets it is
    handed (the runtime seeks where the store or the group says)."""

    def __init__(self, service: str, settings: Settings, options: dict[str, str]) -> None:
        base: Any = service_class(service)
        self.seen: list[int] = []
        seen = self.seen

        class Recording(base):  # type: ignore[misc, valid-type]
            def process(self, batch: Sequence[Delivered]) -> None:
                seen.extend(d.offset for d in batch if d.partition == PART)
                super().process(batch)

        self.runner = ServiceRunner(
            Recording, settings, service_name=service, options=options, metrics_port=0
        )
        self.thread = threading.Thread(target=self.runner.run, daemon=True)
        self.thread.start()

    def wait(self, last: int = EVENTS - 1) -> list[int]:
        wait_for(lambda: last in self.seen, 60, what=f"offset {last} processed")
        return self.seen

    def stop(self) -> None:
        self.runner.request_stop()
        self.thread.join(30)


def _settings(bootstrap: str, topic: str, home: Path, group: str) -> Settings:
    return Settings(
        bootstrap_servers=bootstrap,
        events_topic=topic,
        dlq_topic=f"{topic}.dlq",
        group=group,
        state_dir=home,
        commit_interval_ms=100,
        batch_timeout_ms=100,
        auto_offset_reset="earliest",
    )


def _cli(
    capsys: pytest.CaptureFixture[str], bootstrap: str, topic: str, *argv: str
) -> tuple[int, str, str]:
    code = main(["offsets", *argv, "--bootstrap-servers", bootstrap, "--events-topic", topic])
    out = capsys.readouterr()
    return code, out.out, out.err


def _show(
    capsys: pytest.CaptureFixture[str], bootstrap: str, topic: str, args: list[str]
) -> dict[int, dict[str, Any]]:
    code, out, err = _cli(capsys, bootstrap, topic, "show", *args, "--json")
    assert code == 0, err
    return {row["partition"]: row for row in json.loads(out)["partitions"]}


@pytest.mark.parametrize("service", ["audit", "projector", "resume-cache", "noop", "capture"])
def test_skip_past_a_poison_event_then_rewind(
    service: str,
    kafka_bootstrap: str,
    topic: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    group = f"g-{service}-{topic}"
    options = _options(service, tmp_path)
    args = [service, "--group", group, "--state-dir", str(tmp_path)]
    args += [f"-o{k}={v}" for k, v in options.items()]
    settings = _settings(kafka_bootstrap, topic, tmp_path, group)

    # a first life: everything consumed, so the store (if any) holds its own position
    first = Run(service, settings, options)
    assert first.wait() == list(range(EVENTS))
    first.stop()
    shown = _show(capsys, kafka_bootstrap, topic, args)
    assert shown[PART]["logEnd"] == EVENTS
    wait_for(
        lambda: _show(capsys, kafka_bootstrap, topic, args)[PART]["group"] == EVENTS,
        30,
        what="the group's commit",
    )
    if service not in STORELESS:
        assert shown[PART]["store"] == EVENTS

    # rewind to just past the poison event: the service starts at POISON + 1
    code, out, err = _cli(
        capsys,
        kafka_bootstrap,
        topic,
        "set",
        *args,
        "--to-offset",
        str(POISON + 1),
        "--partition",
        str(PART),
    )
    assert code == 0, err
    assert "moved 1 partition(s)" in out
    shown = _show(capsys, kafka_bootstrap, topic, args)
    assert shown[PART]["group"] == POISON + 1
    assert shown[PART]["store"] == (None if service in STORELESS else POISON + 1)
    assert shown[PART]["lag"] == EVENTS - POISON - 1
    second = Run(service, settings, options)
    try:
        assert second.wait()[0] == POISON + 1
    finally:
        second.stop()

    # and back by a shift, from the store's (or the group's) position
    code, out, err = _cli(
        capsys, kafka_bootstrap, topic, "set", *args, "--to-offset", "1", "--partition", str(PART)
    )
    assert code == 0, err
    code, out, err = _cli(
        capsys, kafka_bootstrap, topic, "set", *args, "--shift", "-1", "--partition", str(PART)
    )
    assert code == 0, err
    third = Run(service, settings, options)
    try:
        assert third.wait()[0] == 0
    finally:
        third.stop()


def test_refused_while_the_group_has_live_members(
    kafka_bootstrap: str, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    group = f"g-live-{topic}"
    args = ["projector", "--group", group, f"-ostore_url=sqlite:///{tmp_path / 'p.db'}"]
    live = Run(
        "projector",
        _settings(kafka_bootstrap, topic, tmp_path, group),
        _options("projector", tmp_path) | {"store_url": f"sqlite:///{tmp_path / 'p.db'}"},
    )
    try:
        live.wait()
        code, _, err = _cli(capsys, kafka_bootstrap, topic, "set", *args, "--to-earliest")
        assert code == 1
        assert "refused" in err and group in err and "active member" in err
        shown = _show(capsys, kafka_bootstrap, topic, args)
        assert shown[PART]["store"] == EVENTS  # nothing moved
    finally:
        live.stop()


def test_dry_run_by_time_and_errors(
    kafka_bootstrap: str, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    group = f"g-time-{topic}"
    time.sleep(1.1)
    cut = datetime.now(UTC)
    time.sleep(0.1)
    produce_forms(
        kafka_bootstrap, topic, [form("STEP_END", RUN, EVENTS + 1, {"reason": None}, tenant="acme")]
    )
    args = ["noop", "--group", group, "--partition", str(PART)]
    code, out, err = _cli(
        capsys, kafka_bootstrap, topic, "set", *args, "--to-time", cut.isoformat(), "--dry-run"
    )
    assert code == 0, err
    assert "dry run" in out and f"-> {EVENTS:>10}" in out
    broker = Broker(Settings(bootstrap_servers=kafka_bootstrap, events_topic=topic))
    assert broker.committed(group, topic, [PART]) == {}  # a dry run writes nothing

    code, out, err = _cli(capsys, kafka_bootstrap, topic, "set", *args, "--to-offset", "99")
    assert code == 2 and "outside partition" in err and str(PART) in err
    code, out, err = _cli(capsys, kafka_bootstrap, topic, "set", *args, "--shift", "1")
    assert code == 2 and "no position in the group" in err
    code, out, err = _cli(capsys, kafka_bootstrap, topic, "show", "noop", "--partition", "7")
    assert code == 2 and "not [7]" in err
    code, out, err = _cli(capsys, kafka_bootstrap, topic, "show", "no-such-service")
    assert code == 2 and "unknown service 'no-such-service'" in err
