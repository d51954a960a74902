"""Issue 12.1 end to end: one run ID in two tenants is two runs, for the publisher *and* the
consumers' sequence check.

The example of the issue: publish run ``r`` for acme and globex, three events each, without
sequences. Each tenant's ``r`` must be numbered [1, 2, 3], and a consumer must see six events
in order with no gap, conflict or reordering counted (a checker keyed by run ID alone sees
globex's 1 as a second event at acme's sequence 1).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtrail.config import Settings
from runtrail.publisher import Publisher
from tests.support import wait_for
from tests.test_runtime_kafka import Running, _scrape, start
from tests.test_runtime_kafka import topic as topic  # the fixture

pytestmark = pytest.mark.kafka

ANOMALY = re.compile(r'runtrail_sequence_anomalies_total\{kind="(\w+)",service="collect"\} (\S+)')


@pytest.fixture
def collector(kafka_bootstrap: str, topic: str) -> Iterator[Running]:
    yield from start(kafka_bootstrap, topic)


def test_one_run_id_in_two_tenants_is_numbered_and_checked_apart(
    tmp_path: Path,
    kafka_bootstrap: str,
    topic: str,
    collector: Running,
) -> None:
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        spool_dir=tmp_path / "spool",
        tenant="acme",
        events_topic=topic,
    )
    with Publisher(settings) as publisher:
        for i in range(3):
            for tenant in ("acme", "globex"):
                text = f"{tenant} {i}"
                assert publisher.publish("MODEL_REASONING", "r", {"text": text}, tenant_id=tenant)
        assert publisher.flush(30) == 0

    wait_for(lambda: len(collector.service.seen) >= 6, 60, what="six events")
    seen = [(d.event.tenant_id, d.event.sequence) for d in collector.service.seen]
    assert sorted(seen) == [(t, s) for t in ("acme", "globex") for s in (1, 2, 3)]
    for tenant in ("acme", "globex"):  # one partition (same key), so in order per tenant
        assert [s for t, s in seen if t == tenant] == [1, 2, 3]

    port = collector.runner.metrics_port
    wait_for(lambda: "runtrail_processed_total" in _scrape(port), 10, what="metrics")
    anomalies = {kind: float(n) for kind, n in ANOMALY.findall(_scrape(port))}
    assert all(n == 0 for n in anomalies.values()), anomalies
