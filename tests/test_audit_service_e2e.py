"""``runtrail run audit`` as a real process, on a real broker, with SQLite and PostgreSQL stores.

* End to end: realistic runs of several tenants (one run ID shared by two tenants) published
  with the :class:`~runtrail.publisher.Publisher`, sealed by the service, then checked from the
  outside — ``runtrail audit verify``/``export``/``prove`` as child processes and the
  standalone ``tools/verify_audit_export.py`` — and compared with what the audit topic holds.
* Crash safety: the service is SIGKILLed at random moments at least five times while it
  consumes, and restarted; its final chains (PostgreSQL) must equal, link for link, those of
  an uninterrupted run of another group into another store (SQLite), and every link must have
  reached the audit topic (at-least-once: duplicates allowed, only identical ones).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from prometheus_client import CollectorRegistry

from bench.workload import run_events
from runtrail.audit import NoteVerifier, verify_stored, verify_tree_head
from runtrail.audit.keys import load_public_key
from runtrail.audit.store import LinkStore
from runtrail.config import Settings
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.publisher import Publisher
from runtrail_services.audit.messages import KIND_HEADER, link_line
from runtrail_services.audit.positions import published_name
from tests.support import (
    ServiceProcess,
    create_topic,
    end_offsets,
    produce_forms,
    unique_topic,
    wait_for,
)

pytestmark = [pytest.mark.kafka]

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "verify_audit_export.py"


def topics(bootstrap: str, partitions: int) -> tuple[str, str]:
    """A fresh events topic (with its DLQ) and a fresh audit topic."""
    events = create_topic(bootstrap, unique_topic("audit-ev"), partitions=partitions)
    create_topic(bootstrap, f"{events}.dlq", partitions=partitions)
    audit = create_topic(bootstrap, unique_topic("audit-out"), partitions=partitions)
    return events, audit


def audit_process(
    bootstrap: str,
    events: str,
    audit: str,
    *,
    group: str,
    store_url: str,
    state: Path,
    log: Path,
    env: dict[str, str] | None = None,
    **options: str,
) -> ServiceProcess:
    return ServiceProcess(
        "audit",
        bootstrap,
        events,
        group=group,
        options={"store_url": store_url, **options},
        env={"RUNTRAIL_AUDIT_TOPIC": audit, "RUNTRAIL_STATE_DIR": str(state), **(env or {})},
        log_path=log,
    )


def runtrail(*args: str) -> tuple[int, Any]:
    """``runtrail …`` as a child process: exit code and the JSON of its last output line."""
    proc = subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    return proc.returncode, json.loads(lines[-1]) if lines else None


def read_to_end(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Every message of ``topic`` up to its current end offsets (no count to guess)."""
    ends = end_offsets(bootstrap, topic, partitions)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out: list[Any] = []
    positions = dict.fromkeys(range(partitions), 0)
    deadline = time.monotonic() + 60
    try:
        while any(positions[p] < ends[p] for p in positions) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    out.append(msg)
                    positions[msg.partition()] = msg.offset() + 1
    finally:
        consumer.close()
    assert all(positions[p] >= ends[p] for p in positions), "audit topic not read to its end"
    return out


def link_count(store: LinkStore, expected: dict[tuple[str, str], int]) -> int:
    heads = store.heads_of(expected)
    return sum(h.length for h in heads.values())


def tree_head_size(store: LinkStore) -> int:
    latest = store.latest_tree_head()
    return -1 if latest is None else latest.tree_head.size


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[str]:
    yield sqlite_url(tmp_path / "reference" / "audit.db")


# --- end to end ------------------------------------------------------------------------------
RUNS = [
    ("acme", "run-A"),
    ("acme", "run-B"),
    ("globex", "run-A"),
    ("globex", "run-C"),
    ("initech", "run-D"),
]


def publish_runs(settings: Settings) -> dict[tuple[str, str], list[str]]:
    """Interleaved agent runs (steps of model request/response, tool call/result, step end)
    through the Publisher; the eventIds of each run, in order."""
    published: dict[tuple[str, str], list[str]] = defaultdict(list)
    rng = random.Random(5)
    with Publisher(settings, registry=CollectorRegistry()) as publisher:
        for step in range(1, 5):
            order = list(RUNS)
            rng.shuffle(order)
            for tenant, run in order:
                calls = [
                    (
                        "MODEL_REQUEST",
                        {
                            "prompt": {
                                "model": "m-1",
                                "messages": [
                                    {"role": "user", "content": f"{run} step {step} — résumé"}
                                ],
                            }
                        },
                    ),
                    ("MODEL_RESPONSE", {"message": f"thinking about {run}", "raw": None}),
                    (
                        "MODEL_RESPONSE",
                        {
                            "message": " done",
                            "raw": {"usage": {"prompt_tokens": 10 * step, "completion_tokens": 3}},
                        },
                    ),
                    (
                        "TOOL_CALL",
                        {
                            "callId": f"c{step}",
                            "toolName": "search",
                            "arguments": {"q": run, "limit": step},
                        },
                    ),
                    (
                        "TOOL_RESULT",
                        {
                            "callId": f"c{step}",
                            "toolName": "search",
                            "output": {"hits": [run, tenant], "score": 0.5},
                        },
                    ),
                    ("STEP_END", {"reason": "tool_use"}),
                ]
                for event_type, data in calls:
                    event_id = publisher.publish(
                        event_type, run, data, tenant_id=tenant, turn_id=f"t{step}", step=step
                    )
                    assert event_id is not None
                    published[(tenant, run)].append(event_id)
        assert publisher.flush(30) == 0
    return published


def test_end_to_end_sealed_verified_exported_published(
    kafka_bootstrap: str, postgres_url: str, tmp_path: Path
) -> None:
    events_topic, audit_topic = topics(kafka_bootstrap, 3)
    settings = Settings(
        bootstrap_servers=kafka_bootstrap, events_topic=events_topic, spool_dir=tmp_path / "spool"
    )
    published = publish_runs(settings)
    total = sum(len(ids) for ids in published.values())
    state = tmp_path / "state"
    proc = audit_process(
        kafka_bootstrap,
        events_topic,
        audit_topic,
        group=f"g-{events_topic}",
        store_url=postgres_url,
        state=state,
        log=tmp_path / "audit.log",
        tree_head_interval_s="1",
    )
    store = open_store(AUDIT_LINKS, postgres_url)
    try:
        wait_for(
            lambda: link_count(store, dict.fromkeys(published, 0)) == total,
            90,
            what="every event sealed",
        )
        wait_for(lambda: tree_head_size(store) == len(RUNS), 30, what="a tree head of all")
        assert proc.terminate() == 0
    finally:
        proc.close()

    # every chain, from the outside: the CLI against the store, the standalone script on exports
    db = ("--store", postgres_url)
    for (tenant, run), ids in published.items():
        code, result = runtrail("audit", "verify", "--run", run, "--tenant", tenant, *db)
        assert (code, result) == (
            0,
            {"valid": True, "length": len(ids), "firstBrokenIndex": None, "reason": None},
        )
        chain = store.load_chain(tenant, run)
        assert [link.event_id for link in chain] == ids  # topic order, this tenant only
        assert {link.tenant_id for link in chain} == {tenant}
        export = tmp_path / f"{tenant}-{run}.jsonl"
        assert (
            runtrail("audit", "export", "--run", run, "--tenant", tenant, "-o", str(export), *db)[0]
            == 0
        )
        tool = subprocess.run(
            [sys.executable, "-I", str(TOOL), str(export)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert tool.returncode == 0 and json.loads(tool.stdout)["length"] == len(ids)
    acme_a, globex_a = store.load_chain("acme", "run-A"), store.load_chain("globex", "run-A")
    assert {link.hash for link in acme_a}.isdisjoint(link.hash for link in globex_a)

    # the audit topic: each run's links under its key, byte for byte the export lines
    messages = read_to_end(kafka_bootstrap, audit_topic, 3)
    links: dict[str, list[bytes]] = defaultdict(list)
    tree_heads = []
    for msg in messages:
        kind = dict(msg.headers())[KIND_HEADER]
        if kind == b"link":
            links[msg.key().decode()].append(msg.value())
        else:
            tree_heads.append(json.loads(msg.value()))
    for run in {run for _, run in RUNS}:
        expected = [
            link_line(link) for (t, r) in published if r == run for link in store.load_chain(t, r)
        ]
        assert sorted(links[run]) == sorted(expected)  # exactly once in a clean run
    key_file = state / "audit" / "checkpoint.key.pub"
    verifier = NoteVerifier("runtrail.local/audit", load_public_key(key_file))
    last = tree_heads[-1]
    assert verify_tree_head(last["note"], verifier).size == len(RUNS)

    # a tree head taken from the topic holds a run's chain, verified by the CLI
    note = tmp_path / "from-topic.note"
    note.write_text(last["note"])
    code, result = runtrail(
        "audit",
        "verify",
        "--run",
        "run-C",
        "--tenant",
        "globex",
        "--tree-head",
        str(note),
        "--public-key",
        str(key_file),
        *db,
    )
    assert (code, result["valid"]) == (0, True)
    code, bundle = runtrail("audit", "prove", "--run", "run-C", "--tenant", "globex", *db)
    assert code == 0 and bundle["proof"]["head"]["length"] == len(published[("globex", "run-C")])
    store.close()


# --- crash safety ----------------------------------------------------------------------------
def tenant_workload(total: int, seed: int = 11) -> list[dict[str, Any]]:
    """Interleaved runs of three tenants (realistic event shapes from bench.workload)."""
    rng = random.Random(seed)
    tenants = ["acme", "globex", "initech"]
    active: list[Iterator[dict[str, Any]]] = []
    out: list[dict[str, Any]] = []
    started = 0
    while len(out) < total:
        while len(active) < 24:
            tenant = tenants[started % 3]
            active.append(run_events(f"run-{started // 2:05d}", rng, tenant=tenant, steps=3))
            started += 1
        i = rng.randrange(len(active))
        try:
            out.append(next(active[i]))
        except StopIteration:
            active.pop(i)
    return out


@pytest.mark.slow
def test_sigkill_at_random_points_then_restart_equals_an_uninterrupted_run(
    kafka_bootstrap: str, postgres_url: str, sqlite_store: str, tmp_path: Path
) -> None:
    partitions = 4
    events_topic, audit_topic = topics(kafka_bootstrap, partitions)
    reference_topic = create_topic(
        kafka_bootstrap, unique_topic("audit-ref"), partitions=partitions
    )
    forms = tenant_workload(12_000)
    expected: dict[tuple[str, str], int] = defaultdict(int)
    for f in forms:
        expected[(f["tenantId"], f["runId"])] += 1
    assert ("acme", "run-00000") in expected and ("globex", "run-00000") in expected

    def produce_steadily() -> None:
        for i in range(0, len(forms), 500):
            produce_forms(kafka_bootstrap, events_topic, forms[i : i + 500])
            time.sleep(0.4)

    producer = threading.Thread(target=produce_steadily)
    producer.start()
    # the uninterrupted reference: another group, another store, another audit topic
    reference = audit_process(
        kafka_bootstrap,
        events_topic,
        reference_topic,
        group=f"ref-{events_topic}",
        store_url=sqlite_store,
        state=tmp_path / "ref-state",
        log=tmp_path / "reference.log",
        tree_head_interval_s="0",
    )
    # the victim: static group membership while it is being killed, so each restart takes
    # its partitions back at once instead of waiting out the dead member's session
    victim_env = {
        "RUNTRAIL_BATCH_SIZE": "300",
        "RUNTRAIL_KAFKA_OPTIONS": json.dumps({"group.instance.id": f"victim-{events_topic}"}),
    }
    store = open_store(AUDIT_LINKS, postgres_url)
    rng = random.Random(3)
    kills: list[int] = []
    victim: ServiceProcess | None = None
    try:
        for _ in range(5):
            victim = audit_process(
                kafka_bootstrap,
                events_topic,
                audit_topic,
                group=f"victim-{events_topic}",
                store_url=postgres_url,
                state=tmp_path / "victim-state",
                log=tmp_path / "victim.log",
                env=victim_env,
                tree_head_interval_s="0.5",
            )
            before = link_count(store, expected)
            wait_for(lambda b=before: link_count(store, expected) > b, 60, 0.05, what="progress")
            time.sleep(rng.uniform(0.05, 0.8))
            victim.kill()  # SIGKILL: no flush, no commit, no goodbye
            victim.close()
            kills.append(link_count(store, expected))
        assert all(count < len(forms) for count in kills), f"killed after the end: {kills}"
        producer.join(120)
        # the last start joins as a dynamic member (static members skip the leave/revoke a
        # clean SIGTERM goes through, which is checked at the end)
        victim = audit_process(
            kafka_bootstrap,
            events_topic,
            audit_topic,
            group=f"victim-{events_topic}",
            store_url=postgres_url,
            state=tmp_path / "victim-state",
            log=tmp_path / "victim.log",
            env={"RUNTRAIL_BATCH_SIZE": "300"},
            tree_head_interval_s="0.5",
        )
        wait_for(lambda: link_count(store, expected) == len(forms), 180, what="victim done")
        reference_store = open_store(AUDIT_LINKS, sqlite_store)
        try:
            wait_for(
                lambda: link_count(reference_store, expected) == len(forms),
                180,
                what="reference done",
            )
            for key, length in expected.items():
                chain = store.load_chain(*key)
                assert len(chain) == length
                assert chain == reference_store.load_chain(*key), f"chain {key} differs"
                assert verify_stored(store, *key).valid
        finally:
            reference_store.close()
        ends = end_offsets(kafka_bootstrap, events_topic, partitions)
        wait_for(
            lambda: store.stored_offsets(published_name(events_topic), range(partitions)) == ends,
            30,
            what="published positions",
        )
        assert store.stored_offsets(events_topic, range(partitions)) == ends
        assert victim.terminate() == 0
    finally:
        producer.join(5)
        if victim is not None:
            victim.close()
        reference.close()

    # at-least-once on the audit topic: every sealed link is there, any duplicate identical
    messages = read_to_end(kafka_bootstrap, audit_topic, partitions)
    seen: dict[tuple[bytes, int], set[bytes]] = defaultdict(set)
    for msg in messages:
        if dict(msg.headers())[KIND_HEADER] == b"link":
            seen[(msg.key(), json.loads(msg.value())["index"])].add(msg.value())
    missing = [
        (link.tenant_id, link.run_id, link.index)
        for key in expected
        for link in store.load_chain(*key)
        if link_line(link) not in seen.get((link.run_id.encode(), link.index), set())
    ]
    assert missing == [], f"{len(missing)} sealed links never reached the audit topic"
    # run IDs repeat across tenants, so one (key, index) may hold one line per tenant
    assert all(len(values) <= 3 for values in seen.values())
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT (tenant_id, event_id)) FROM audit_links"
        ).fetchone()
    assert row == (len(forms), len(forms))  # nothing sealed twice
    store.close()
