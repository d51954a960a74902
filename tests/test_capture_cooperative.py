"""Capture members joining and leaving under load with incremental ``cooperative-sticky``
assignment, on the real broker, one shared file sink.

Pairing state is per partition, and here every run always has a model node and a tool node
open: each round closes the step the round before opened (TOOL_RESULT, STEP_END) and opens
the next (MODEL_REQUEST, MODEL_RESPONSE, TOOL_CALL). So every partition that moves carries open
nodes and closed nodes straddling its commit point: the member giving it up flushes and commits
it at its oldest open node with the straddlers' marks as metadata (the runtime's revoke
commit), keeps its other partitions and their open nodes, and the next owner re-forms the open
ones from there and skips the straddlers' tails. After three members came and went, the files
must hold exactly the records a pairer makes of the whole topic read in partition order: none
missing, none truncated, none written twice (no member crashed, so no identical re-write is
expected either); the group must have agreed on cooperative-sticky and no member may have
taken a rebalance for an outage (a commit refused while the group rebalances).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition

from runtrail.capture.holds import PREFIX
from tests.scale_support import SteadyStream, assignor, hand_over, outages
from tests.support import ServiceProcess, create_topic, form, unique_topic, wait_for
from tests.test_capture_service_kafka import file_lines, record_ids, reference

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 4
RUNS = 40
STRATEGY = "cooperative-sticky"


def _step_opens(run: str, tenant: str, step: int, first: int) -> list[dict[str, Any]]:
    """The request, the (whole) response and a tool call of ``step``: both nodes stay open."""
    where: dict[str, Any] = {
        "run_id": run,
        "tenant": tenant,
        "step": step,
        "sessionId": f"sess-{run}",
    }
    prompt = {"model": "m-1", "messages": [{"role": "user", "content": f"{run} {step}"}]}
    raw = {"id": f"resp-{run}-{step}", "usage": {"input": 10 + step, "output": step % 7}}
    call = {"callId": f"c-{step}", "toolName": "search", "arguments": {"q": f"{run}/{step}"}}
    return [
        form("MODEL_REQUEST", sequence=first, data={"prompt": prompt}, **where),
        form(
            "MODEL_RESPONSE", sequence=first + 1, data={"message": f"a{step}", "raw": raw}, **where
        ),
        form("TOOL_CALL", sequence=first + 2, data=call, **where),
    ]


def _step_closes(run: str, tenant: str, step: int, first: int) -> list[dict[str, Any]]:
    """The tool's result (closes the tool node) and the step's end (closes the model node)."""
    where: dict[str, Any] = {
        "run_id": run,
        "tenant": tenant,
        "step": step,
        "sessionId": f"sess-{run}",
    }
    result = {"callId": f"c-{step}", "toolName": "search", "output": {"hits": [step]}}
    return [
        form("TOOL_RESULT", sequence=first, data={**result, "error": None}, **where),
        form("STEP_END", sequence=first + 1, data={"reason": "tool_use"}, **where),
    ]


def _round(k: int) -> list[dict[str, Any]]:
    """Every run closes step ``k`` (from round 1 on) and opens step ``k + 1``: three events in
    round 0, five in every later one (200 events, 80 records), run after run. So a partition's
    oldest open node (its commit point) is the first run's new request, and the nodes the
    later runs close after it straddle that point: a commit carries their marks."""
    before = 0 if k == 0 else 5 * k - 2  # events of each run in the rounds before
    out = []
    for r in range(RUNS):
        run, tenant = f"run-{r}", ("acme", "globex")[r % 2]
        events = _step_closes(run, tenant, k, before + 1) if k else []
        events += _step_opens(run, tenant, k + 1, before + len(events) + 1)
        out.extend(events)
    return out


def _commit_metadata(bootstrap: str, group: str, topic: str) -> list[str]:
    """The group's commit metadata of every partition ("" where there is none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        wanted = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return [c.metadata or "" for c in consumer.committed(wanted, timeout=10)]
    finally:
        consumer.close()


def test_capture_members_join_and_leave_with_cooperative_assignment_and_write_each_record_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events = create_topic(kafka_bootstrap, unique_topic("capture-coop"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{events}.dlq", partitions=PARTITIONS)
    root = tmp_path / "capture"
    group = f"g-{events}"

    def log_of(i: int) -> Path:
        return tmp_path / f"capture-{i}.log"

    def member(i: int) -> ServiceProcess:
        return ServiceProcess(
            "capture",
            kafka_bootstrap,
            events,
            group=group,
            # idle expiry off: records must not depend on timing
            options={"sink_url": root.as_uri(), "idle_flush_s": "86400"},
            env={
                "RUNTRAIL_ASSIGNMENT_STRATEGY": STRATEGY,
                "RUNTRAIL_STATE_DIR": str(tmp_path / f"state-{i}"),
            },
            log_path=log_of(i),
        )

    agreed: list[str] = []

    def leaving(i: int, proc: ServiceProcess) -> None:
        if not agreed:  # two members in the group: what did they agree on?
            agreed.append(assignor(kafka_bootstrap, group))

    members: list[ServiceProcess] = []
    try:
        with SteadyStream(kafka_bootstrap, events, _round, "runId") as stream:
            members = hand_over(member, log_of, leaving=leaving)
            stream.stop()
        expected = reference(kafka_bootstrap, events, sum(stream.produced.values()))
        # every step but the last of each run was closed: two records each
        assert len(expected) == 2 * (sum(stream.produced.values()) - 3 * RUNS) // 5
        wait_for(
            lambda: set(record_ids(file_lines(root))) >= set(expected), 60, what="every record"
        )
        assert members[-1].terminate() == 0
    finally:
        for m in members:
            m.close()
    assert agreed == [STRATEGY]
    # the commit points carried straddlers' marks (what each hand-over relies on too)
    marks = _commit_metadata(kafka_bootstrap, group, events)
    assert any(m.startswith(PREFIX) for m in marks), marks
    lines = file_lines(root)
    ids = record_ids(lines)
    doubled = sorted(rid for rid, n in Counter(ids).items() if n > 1)
    assert not doubled, f"{len(doubled)} records written twice, e.g. {doubled[:3]}"
    assert sorted(lines) == sorted(expected.values())  # none missing, extra, truncated
    assert not any(orjson.loads(line)["incomplete"] for line in lines)
    found = outages(map(log_of, range(len(members))))
    assert not found, found
