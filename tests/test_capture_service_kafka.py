"""``runtrail run capture`` against a real broker: exact records, SIGKILLs, S3, idle expiry.

The reference for every comparison is the library's pairer fed directly with the topic as it
stands (partition order), and, independently, what the scripted agent knows it published
(:func:`tests.capture_agent.oracle`).
"""

from __future__ import annotations

import random
import re
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import obstore
import orjson
import pytest

from runtrail.capture import NodeIoRecord, NodePairer, read_records
from runtrail.capture.repair import capture_files
from runtrail.events import EventCodec
from runtrail.persistence.object_store import open_object_store
from runtrail.persistence.url_options import split_options
from tests.capture_agent import observed, oracle, publish, publish_in_background, script
from tests.support import (
    ServiceProcess,
    committed_offsets,
    consume_all,
    create_topic,
    end_offsets,
    unique_topic,
    wait_for,
)

if TYPE_CHECKING:
    from tests.s3_fixture import S3Endpoint

pytestmark = [pytest.mark.kafka]
PARTITIONS = 3
#: Idle expiry off for the exact comparisons: records must not depend on timing.
NO_EXPIRY = {"idle_flush_s": "86400"}


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = create_topic(kafka_bootstrap, unique_topic("capture"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{name}.dlq", partitions=PARTITIONS)
    return name


def reference(bootstrap: str, topic: str, expect: int) -> dict[str, bytes]:
    """recordId -> JSON line, from a pairer fed the whole topic in partition order."""
    messages = consume_all(bootstrap, topic, expect=expect)
    assert len(messages) == expect
    codec = EventCodec()
    pairer = NodePairer()
    lines: dict[str, bytes] = {}
    for msg in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        event = codec.decode(msg.value()).event
        for record in pairer.feed(event, msg.partition(), msg.offset(), now_ms=0):
            lines[record.record_id] = record.to_json_line()
    return lines


def file_lines(root: Path) -> list[bytes]:
    """Every complete line of every capture file under ``root``."""
    out: list[bytes] = []
    for path in capture_files(root):
        with path.open("rb") as handle:
            out.extend(line for line in handle if line.endswith(b"\n"))
    return out


def record_ids(lines: list[bytes]) -> list[str]:
    return [orjson.loads(line)["recordId"] for line in lines]


def metric(proc: ServiceProcess, name: str, **labels: str) -> float:
    """One sample of the child's /metrics (0 when absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port()}/metrics", timeout=5) as r:
        text = r.read().decode()
    wanted = {"service": "capture", **labels}
    for match in re.finditer(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.M):
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if found == wanted:
            return float(match.group(2))
    return 0.0


def all_committed(bootstrap: str, group: str, topic: str) -> bool:
    """Every partition that has events is committed at its end (empty ones never are)."""
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    committed = committed_offsets(bootstrap, group, topic, PARTITIONS)
    return all(committed[p] == end for p, end in ends.items() if end > 0)


def capture(
    bootstrap: str,
    topic: str,
    tmp_path: Path,
    group: str,
    env: dict[str, str] | None = None,
    **options: str,
) -> ServiceProcess:
    return ServiceProcess(
        "capture",
        bootstrap,
        topic,
        group=group,
        options=options,
        env=env,
        log_path=tmp_path / "capture.log",
    )


def test_the_files_hold_exactly_the_expected_records(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    agent = script(24, hang=7)
    root = tmp_path / "capture"
    proc = capture(
        kafka_bootstrap, topic, tmp_path, f"g-{topic}", sink_url=root.as_uri(), **NO_EXPIRY
    )
    try:
        publish(kafka_bootstrap, topic, agent.calls, tmp_path / "spool")
        expected = reference(kafka_bootstrap, topic, len(agent.calls))
        assert len(expected) == agent.record_count  # the reference itself is complete
        wait_for(lambda: len(file_lines(root)) >= len(expected), 60, what="every record on disk")
        time.sleep(0.5)  # anything extra would show up now
        wait_for(lambda: metric(proc, "runtrail_capture_open_nodes") == 1, 10, what="1 open node")
        assert metric(proc, "runtrail_capture_records_total", node_type="MODEL") == sum(
            1 for _, _, f in agent.expected if f["nodeType"] == "MODEL"
        )
        assert proc.terminate() == 0
    finally:
        proc.close()
    lines = file_lines(root)
    assert sorted(lines) == sorted(expected.values())  # exactly: nothing missing, extra, doubled
    assert observed(agent, (orjson.loads(line) for line in lines)) == oracle(agent)
    tenants = {path.relative_to(root).parts[0] for path in capture_files(root)}
    assert tenants == {"acme", "globex"}


@pytest.mark.slow
def test_sigkills_while_consuming_lose_nothing_and_duplicate_only_identically(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    agent = script(300, hang=3, concurrent=24)  # the hung step holds one partition's commits
    root = tmp_path / "capture"
    group = f"g-{topic}"
    options = {"sink_url": root.as_uri(), "max_bytes": "32768", **NO_EXPIRY}
    # static membership: a restarted member takes its partitions over at once, not after the
    # dead one's session times out
    env = {
        "RUNTRAIL_BATCH_SIZE": "200",
        "RUNTRAIL_KAFKA_OPTIONS": '{"group.instance.id": "capture-under-test"}',
    }
    rng = random.Random(11)
    agent_thread = publish_in_background(
        kafka_bootstrap, topic, agent.calls, tmp_path / "spool", per_second=500
    )
    kills = 0
    for _ in range(6):
        proc = capture(kafka_bootstrap, topic, tmp_path, group, env, **options)
        try:
            wait_for(lambda p=proc: p.processed() > 0, 60, 0.05, what="the service consuming")
            time.sleep(rng.uniform(0.05, 1.2))
            assert proc.alive()
            proc.kill()
            kills += 1
        finally:
            proc.close()
    agent_thread.join(120)
    assert not agent_thread.errors  # type: ignore[attr-defined]
    expected = reference(kafka_bootstrap, topic, len(agent.calls))
    assert len(expected) == agent.record_count

    final = capture(kafka_bootstrap, topic, tmp_path, group, env, **options)
    try:
        wait_for(
            lambda: set(record_ids(file_lines(root))) >= set(expected), 120, what="all records"
        )
        time.sleep(0.5)  # a stray extra write would land now
    finally:
        # killed too: a static member's SIGTERM trips a runtime bug at consumer.close()
        # (KafkaError _DESTROY from assignment() in the revoke callback); clean shutdown is
        # covered by the other tests, which use dynamic membership
        final.close()

    lines = file_lines(root)
    ids = record_ids(lines)
    assert kills >= 5
    assert set(ids) == set(expected)  # nothing missing, nothing foreign (no truncated copies)
    assert all(line == expected[rid] for rid, line in zip(ids, lines, strict=True))
    redelivered = sum(n - 1 for n in Counter(ids).values())
    assert redelivered > 0, "no kill landed between a write and its commit: nothing was tested"
    read_back = read_records(root.as_uri())
    assert sorted(r.record_id for r in read_back) == sorted(expected)  # each record once
    assert all(r == NodeIoRecord.from_json(expected[r.record_id]) for r in read_back)
    assert observed(agent, (r.model_dump(mode="json", by_alias=True) for r in read_back)) == oracle(
        agent
    )


def test_capture_into_object_storage_end_to_end(
    kafka_bootstrap: str, topic: str, tmp_path: Path, moto_s3: S3Endpoint
) -> None:
    agent = script(12)
    url = moto_s3.url(f"e2e/{topic}")
    proc = capture(
        kafka_bootstrap,
        topic,
        tmp_path,
        f"g-{topic}",
        sink_url=url,
        compression="zstd",
        **NO_EXPIRY,
    )
    try:
        publish(kafka_bootstrap, topic, agent.calls, tmp_path / "spool")
        expected = reference(kafka_bootstrap, topic, len(agent.calls))
        wait_for(lambda: len(read_records(url)) >= len(expected), 60, what="records in S3")
        assert proc.terminate() == 0
    finally:
        proc.close()
    stored = read_records(url)
    assert sorted(r.to_json_line() for r in stored) == sorted(expected.values())
    assert observed(agent, (r.model_dump(mode="json", by_alias=True) for r in stored)) == oracle(
        agent
    )
    objects: list[dict[str, Any]] = []
    base, store_options = split_options(url)
    for chunk in obstore.list(open_object_store(base, store_options)):
        objects.extend(chunk)
    assert objects and all(str(o["path"]).endswith(".jsonl.zst") for o in objects)


def test_an_idle_step_is_flushed_incomplete_and_releases_its_offsets(
    kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    agent = script(4, hang=1)
    root = tmp_path / "capture"
    group = f"g-{topic}"
    proc = capture(
        kafka_bootstrap, topic, tmp_path, group, sink_url=root.as_uri(), idle_flush_s="1"
    )
    try:
        publish(kafka_bootstrap, topic, agent.calls, tmp_path / "spool")

        def incomplete() -> list[dict[str, Any]]:
            return [r for r in map(orjson.loads, file_lines(root)) if r["incomplete"]]

        wait_for(lambda: incomplete(), 30, what="the idle node flushed")
        wait_for(lambda: all_committed(kafka_bootstrap, group, topic), 30, what="offsets released")
        assert metric(proc, "runtrail_capture_incomplete_total", node_type="MODEL") == 1
        assert proc.terminate() == 0
    finally:
        proc.close()
    [node] = incomplete()
    assert node["nodeId"] == "model@run-0001|turn-9|1"
    assert node["outputText"] == "half an ans"
    assert len(file_lines(root)) == agent.record_count + 1
