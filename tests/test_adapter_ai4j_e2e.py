"""A real ai4j agent, published through ``RuntrailAgentListener``, on the real broker and services.

ai4j's ReAct runtime (scripted model and tool, no network; ``Driver run``) runs three runs
with two listeners attached: ai4j's own ``IoCaptureAgentListener`` (a JSONL file per run) and
runtrail's. Then, from the outside:

* every record on the topic decodes with runtrail's codec, is keyed by its run ID, and lies
  on the partition the Python publisher's producer (librdkafka, ``murmur2_random``) picks for
  that key;
* the real capture service writes the records ai4j's listener wrote, under the field mapping
  of ``docs/CAPTURE.md`` (``tests/test_ai4j_conformance.py``), once ai4j's records are passed
  through the Python redactor: the agent's prompt and tool arguments hold secrets, and what
  leaves the process must hold none;
* the real audit service seals each run into a chain ``runtrail audit verify`` accepts;
* the real resume-cache service serves each run's successful tool call to a re-run;
* the real projector projects each run (nodes, retries, tokens) to its terminal status:
  ``succeeded`` for the normal runs, ``failed`` for a run whose model fails (the adapter
  adds run.accepted / run.state_transitioned / run.succeeded / run.failed);
* the real sessions service checkpoints each run's ai4j session (ai4j's session ID is
  runtrail's sessionId), and the session restored from the store equals the whole topic's;
* the ai4j example of docs/ADAPTERS.md runs as written, and the overhead per event is measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from runtrail.capture import NodeIoRecord
from runtrail.capture.repair import capture_files
from runtrail.config import Settings
from runtrail.events.codec import EventCodec
from runtrail.kafka.producer_config import producer_config
from runtrail.persistence import AUDIT_LINKS, SESSION_SNAPSHOTS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.publisher.redaction import redact_value
from runtrail.resume import ResumeCache
from runtrail.resume.http_client import ServiceCacheClient
from runtrail.sessions.restore import build_from_topic, restore_session
from tests.ai4j_adapter import adapter
from tests.projector_support import projection_at, projector, wait_caught_up
from tests.resume_support import TOKENS, CacheService
from tests.support import ServiceProcess, consume_all, create_topic, unique_topic, wait_for
from tests.test_ai4j_conformance import from_ai4j, from_runtrail

pytestmark = [pytest.mark.kafka, pytest.mark.slow]  # ~100 s: JVM, agent runs, two services

RUNS = ("ai4j-run-a", "ai4j-run-b", "ai4j-run-c")
FAILING_RUN = "ai4j-run-fails"  # its model's stream fails: ai4j reports ERROR and throws
FAILING_SYNC_RUN = "ai4j-run-fails-sync"  # Agent.run: ai4j throws, no ERROR; runFailed ends it
TENANT = "acme"
SECRETS = ("sk-live-0123456789abcdefXYZ", "ghp_abcdefghijklmnopqrstuvwx")
PARTITIONS = 3
VERIFY = (sys.executable, "-m", "runtrail_tools.cli.main", "audit", "verify")


def python_partitions(bootstrap: str, keys: list[str]) -> dict[str, int]:
    """The partition the Python publisher's producer config puts each key on (a probe topic)."""
    probe = create_topic(bootstrap, unique_topic("ai4j-probe"), partitions=PARTITIONS)
    config = producer_config(Settings(bootstrap_servers=bootstrap))
    producer = Producer(config)
    seen: dict[str, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        seen[msg.key().decode()] = msg.partition()

    for key in keys:
        producer.produce(probe, key=key.encode(), value=b"probe", on_delivery=delivered)
    assert producer.flush(30) == 0
    return seen


@pytest.fixture(scope="module")
def published(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    topic = create_topic(kafka_bootstrap, unique_topic("ai4j-adapter"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{topic}.dlq", partitions=PARTITIONS)
    ai4j_dir = tmp_path_factory.mktemp("ai4j-records")
    started_ms = int(time.time() * 1000)
    stats = adapter().run("run", kafka_bootstrap, topic, TENANT, str(ai4j_dir), *RUNS)
    ended_ms = int(time.time() * 1000)
    ai4j = {
        run: [json.loads(line) for line in (ai4j_dir / f"{run}.jsonl").read_text().splitlines()]
        for run in RUNS
    }
    return {"topic": topic, "stats": stats, "ai4j": ai4j, "window_ms": (started_ms, ended_ms)}


def test_every_event_is_published_and_none_is_lost(published: dict[str, Any]) -> None:
    stats = published["stats"]
    assert stats["failed"] == stats["dropped"] == stats["inFlight"] == 0
    assert not [k for k in stats if k.startswith("refused.")], stats
    assert stats["published"] == stats["accepted"] > 0
    # ai4j types runtrail has no type for are counted, by type, not silently dropped
    # (FINAL_OUTPUT is not among them: it is the run's run.succeeded)
    skipped = {k: v for k, v in stats.items() if k.startswith("skipped.")}
    assert skipped == {"skipped.STEP_START": 2 * len(RUNS)}


def test_records_decode_keyed_by_run_on_the_python_partition(
    kafka_bootstrap: str, published: dict[str, Any]
) -> None:
    msgs = consume_all(kafka_bootstrap, published["topic"], expect=published["stats"]["published"])
    codec = EventCodec()
    partitions = python_partitions(kafka_bootstrap, list(RUNS))
    assert len(set(partitions.values())) > 1, "the runs must spread for the check to mean much"
    by_run: dict[str, list[Any]] = {}
    for msg in msgs:
        event = codec.decode(msg.value()).event
        assert msg.key().decode() == event.run_id
        assert msg.partition() == partitions[event.run_id], event.run_id
        headers = dict(msg.headers())
        assert headers["rt.type"].decode() == event.type
        assert headers["rt.event_id"].decode() == event.event_id
        assert event.tenant_id == TENANT
        by_run.setdefault(event.run_id, []).append(event)
        for secret in SECRETS:
            assert secret.encode() not in msg.value()
    for run, events in by_run.items():  # per (tenant, run) sequence 1..n, in topic order
        assert [e.sequence for e in events] == list(range(1, len(events) + 1)), run
    assert sorted(by_run) == sorted(RUNS)


def test_the_adapters_own_events_get_time_ordered_ids(
    kafka_bootstrap: str, published: dict[str, Any]
) -> None:
    """The events the adapter makes itself (run.accepted, the first state transition) get
    version 7 eventIds (RFC 9562) stamped while it ran, as the Python publisher stamps them."""
    msgs = consume_all(kafka_bootstrap, published["topic"], expect=published["stats"]["published"])
    codec = EventCodec()
    started_ms, ended_ms = published["window_ms"]
    ids = [
        uuid.UUID(event.event_id)
        for event in (codec.decode(m.value()).event for m in msgs)
        if event.type == "run.accepted"
    ]
    assert len(ids) == len(RUNS)
    for stamped in ids:
        assert (stamped.version, stamped.variant) == (7, uuid.RFC_4122), stamped
        assert started_ms <= stamped.int >> 80 <= ended_ms, stamped
    assert len({stamped.int & ((1 << 74) - 1) for stamped in ids}) == len(ids)


def test_capture_service_records_equal_ai4js_own(
    kafka_bootstrap: str, tmp_path: Path, published: dict[str, Any]
) -> None:
    ai4j = published["ai4j"]
    assert any(s in json.dumps(ai4j) for s in SECRETS), "ai4j's own records hold the secrets"
    want = {run: [from_ai4j(redact_value(r)) for r in records] for run, records in ai4j.items()}
    total = sum(len(r) for r in want.values())
    root = tmp_path / "capture"
    proc = ServiceProcess(
        "capture",
        kafka_bootstrap,
        published["topic"],
        group=f"g-cap-{published['topic']}",
        options={"sink_url": root.as_uri(), "idle_flush_s": "86400"},
        log_path=tmp_path / "capture.log",
    )

    def written() -> list[NodeIoRecord]:
        lines = []
        for path in capture_files(root):
            with path.open("rb") as handle:
                lines.extend(line for line in handle if line.endswith(b"\n"))
        return [NodeIoRecord.model_validate(orjson.loads(line)) for line in lines]

    try:
        wait_for(lambda: len(written()) >= total, 90, what="every record on disk")
        time.sleep(0.5)  # anything extra would show up now
        assert proc.terminate() == 0
    finally:
        proc.close()
    records = written()
    assert len(records) == total
    got: dict[str, list[dict[str, Any]]] = {run: [] for run in RUNS}
    for record in sorted(records, key=lambda r: (r.run_id, r.captured_at_epoch_ms, r.node_id)):
        got[record.run_id].append(from_runtrail(record))
    for run in RUNS:  # within a run, compare as ai4j ordered them (its capture order)
        assert sorted(got[run], key=_order) == sorted(want[run], key=_order), run
        assert len(got[run]) == len(want[run]) == 4
    assert not any(s in repr(got) for s in SECRETS)


def _order(record: dict[str, Any]) -> str:
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS).decode()


def test_the_audit_chain_of_each_run_verifies(
    kafka_bootstrap: str, tmp_path: Path, published: dict[str, Any]
) -> None:
    audit_topic = create_topic(kafka_bootstrap, unique_topic("ai4j-audit"), partitions=PARTITIONS)
    store_url = sqlite_url(tmp_path / "audit.db")
    per_run = published["stats"]["published"] // len(RUNS)
    proc = ServiceProcess(
        "audit",
        kafka_bootstrap,
        published["topic"],
        group=f"g-aud-{published['topic']}",
        options={"store_url": store_url},
        env={"RUNTRAIL_AUDIT_TOPIC": audit_topic, "RUNTRAIL_STATE_DIR": str(tmp_path / "state")},
        log_path=tmp_path / "audit.log",
    )
    store = open_store(AUDIT_LINKS, store_url)
    try:
        keys = {(TENANT, run): 0 for run in RUNS}
        wait_for(
            lambda: sum(h.length for h in store.heads_of(keys).values()) == per_run * len(RUNS),
            90,
            what="every event sealed",
        )
        assert proc.terminate() == 0
    finally:
        proc.close()
    for run in RUNS:
        out = subprocess.run(
            [*VERIFY, "--run", run, "--tenant", TENANT, "--store", store_url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert (out.returncode, result) == (
            0,
            {"valid": True, "length": per_run, "firstBrokenIndex": None, "reason": None},
        )


def test_overhead_per_event(kafka_bootstrap: str, published: dict[str, Any]) -> None:
    """The same agent runs with and without the listener (best of 5 rounds, after a warm-up);
    the numbers go to the test output (``-s``) for the closing note. Bound loosely: only a
    pathological cost (the agent waiting on the broker) should fail here."""
    result = adapter().run("bench", kafka_bootstrap, published["topic"], "200")
    print("\nai4j adapter overhead:", json.dumps(result, sort_keys=True))
    assert result["flushed"] is True
    assert result["stats"]["failed"] == result["stats"]["dropped"] == 0
    assert result["overheadNsPerEvent"] < 1_000_000  # < 1 ms per event on a shared 2-core box


ADAPTERS = Path(__file__).resolve().parents[1] / "docs" / "ADAPTERS.md"
EXAMPLE = (
    Path(__file__).resolve().parents[1]
    / "adapters/ai4j/src/test/java/dev/runtrail/ai4j/ReadmeExample.java"
)


def test_the_readme_example_is_the_one_that_runs(kafka_bootstrap: str) -> None:
    """The ai4j block of docs/ADAPTERS.md is ``ReadmeExample``'s marked lines; run, its run is on the topic."""
    section = ADAPTERS.read_text().split("### ai4j (Java)", 1)[1]
    block = section.split("```java\n", 1)[1].split("```", 1)[0]
    marked = EXAMPLE.read_text().split("// readme:begin\n", 1)[1].split("// readme:end", 1)[0]
    assert block.strip().splitlines() == [
        line.removeprefix("    ") for line in marked.rstrip().splitlines()
    ]
    topic = create_topic(kafka_bootstrap, unique_topic("ai4j-readme"), partitions=PARTITIONS)
    run = ["java", "-cp", adapter().classpath, "dev.runtrail.ai4j.ReadmeExample"]
    proc = subprocess.run(
        [*run, kafka_bootstrap, topic, "readme-run"], capture_output=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    stats = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert stats["published"] == stats["accepted"] > 0 and stats["failed"] == 0
    codec = EventCodec()
    events = [
        codec.decode(m.value()).event
        for m in consume_all(kafka_bootstrap, topic, expect=stats["published"])
    ]
    assert [e.type for e in events] == [
        "run.accepted",
        "run.state_transitioned",
        "MODEL_REQUEST",
        "MODEL_RESPONSE",
        "MODEL_RESPONSE",
        "STEP_END",
        "run.succeeded",
    ]
    assert {e.run_id for e in events} == {"readme-run"}


def test_the_projector_projects_each_run(
    kafka_bootstrap: str, tmp_path: Path, published: dict[str, Any]
) -> None:
    """The real projector: each ai4j run is accepted, executing, then ``succeeded``, with the
    nodes, retry and tokens the scripted model produced (two model calls, two tool results,
    one retry, 12+30 / 5+4); a run whose model fails (published here, on the same topic) is
    ``failed`` with the model's error as the reason. Nothing halted, nothing dead-lettered."""
    fail_dir = tmp_path / "failing"
    fail_dir.mkdir()
    failing = adapter().run(
        "run",
        kafka_bootstrap,
        published["topic"],
        TENANT,
        str(fail_dir),
        f"fail:{FAILING_RUN}",
        f"failsync:{FAILING_SYNC_RUN}",
    )
    # 5 + 4 events; the streamed run's runFailed after its ERROR is a counted no-op
    assert failing["published"] == failing["accepted"] == 9 and failing["failed"] == 0
    assert failing["skipped.runFailed for a run that ended or never started"] == 1
    db = tmp_path / "projection.db"
    proc = projector(kafka_bootstrap, published["topic"], db, tmp_path / "projector.log")
    try:
        wait_caught_up(kafka_bootstrap, db, published["topic"], PARTITIONS)
        assert proc.terminate() == 0
    finally:
        proc.close()
    with projection_at(db) as store:
        for run in RUNS:
            stored = store.get(TENANT, run)
            assert stored is not None, run
            p = stored.state
            assert p is not None, f"{run} halted: {stored}"
            assert (p.status, p.origin, p.gaps) == ("succeeded", "accepted", ())
            assert (p.model_nodes, p.tool_nodes, p.model_retries) == (2, 2, 1)
            assert (p.runtime_tokens.input_tokens, p.runtime_tokens.output_tokens) == (42, 9)
            assert p.version == published["stats"]["published"] // len(RUNS)
        for run, events in ((FAILING_RUN, 5), (FAILING_SYNC_RUN, 4)):
            stored = store.get(TENANT, run)
            assert stored is not None and stored.state is not None, stored
            p = stored.state
            assert (p.status, p.terminal_reason, p.version) == (
                "failed",
                "model exploded: 503 Service Unavailable",
                events,
            ), run
    dlq = consume_all(kafka_bootstrap, f"{published['topic']}.dlq", expect=1, timeout=3)
    assert dlq == []


def test_the_sessions_service_checkpoints_each_runs_session(
    kafka_bootstrap: str, tmp_path: Path, published: dict[str, Any]
) -> None:
    """The real sessions service: ai4j's session of each run (``sess-RUN``, the Driver's
    session ID) is checkpointed with every event of the run, and restored from the store it
    equals the session rebuilt from the whole topic."""
    store_url = (tmp_path / "sessions").as_uri()
    pointers = create_topic(
        kafka_bootstrap,
        f"{published['topic']}.sessions",
        partitions=2,
        **{"cleanup.policy": "compact"},
    )
    proc = ServiceProcess(
        "sessions",
        kafka_bootstrap,
        published["topic"],
        group=f"g-ses-{published['topic']}",
        options={"store_url": store_url, "http_port": "0"},
        env={
            "RUNTRAIL_STATE_DIR": str(tmp_path / "state"),
            "RUNTRAIL_SESSIONS_TOPIC": pointers,
            "RUNTRAIL_SESSIONS_HTTP_TOKENS": json.dumps({TENANT: "tok-acme"}),
        },
        log_path=tmp_path / "sessions.log",
    )
    store = open_store(SESSION_SNAPSHOTS, store_url)
    per_run = published["stats"]["published"] // len(RUNS)

    def revision(session: str) -> int:
        snapshot = store.load(TENANT, session)
        return 0 if snapshot is None else snapshot.revision

    try:
        for run in RUNS:
            wait_for(lambda r=run: revision(f"sess-{r}") >= per_run, 90, what=f"{run} saved")
        assert proc.terminate() == 0
    finally:
        proc.close()
    settings = Settings(bootstrap_servers=kafka_bootstrap, events_topic=published["topic"])
    try:
        for run in RUNS:
            session = f"sess-{run}"
            snapshot = store.load(TENANT, session)
            assert snapshot is not None and snapshot.revision == per_run, run
            assert {e["runId"] for e in snapshot.event_log} == {run}
            types = [e["type"] for e in snapshot.event_log]
            assert types[0] == "run.accepted" and types[-1] == "run.succeeded", run
            restored = restore_session(store, TENANT, session, settings)
            whole = build_from_topic(TENANT, session, settings)
            assert restored.snapshot is not None and restored.replayed == 0
            assert restored.session.snapshot().digest == whole.snapshot().digest
            assert list(restored.session.events()) == list(whole.events())
    finally:
        store.close()


def test_the_resume_cache_serves_each_runs_tool_results(
    kafka_bootstrap: str, tmp_path: Path, published: dict[str, Any]
) -> None:
    """The real resume-cache service: a re-run of an ai4j run finds its successful tool call
    (keyed by the arguments as published, i.e. redacted) and not the failed one."""
    cache_topic = create_topic(
        kafka_bootstrap,
        f"{published['topic']}.cache",
        partitions=PARTITIONS,
        **{"cleanup.policy": "compact"},
    )
    service = CacheService(kafka_bootstrap, published["topic"], cache_topic, tmp_path).start()
    try:
        client = ServiceCacheClient(service.url, TOKENS["acme"], wait_ms=20_000)
        args = '{"city":"Paris","token":"[REDACTED]"}'
        for run in RUNS:
            cache = ResumeCache(run, tenant=TENANT, remote=client)
            wait_for(
                lambda c=cache: c.lookup_tool("weather", args).entry is not None,
                60,
                what=f"the tool entry of {run}",
            )
            hit = cache.lookup_tool("weather", args)
            assert hit.entry is not None and hit.entry.result == '{"tempC":21}', run
            failed = cache.lookup_tool("fail", "{}")
            assert failed.entry is None and failed.trusted, run
    finally:
        service.stop()
