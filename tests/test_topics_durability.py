"""Durability owned by ``topics ensure``: replication factor, ``min.insync.replicas`` and
unclean leader election set, checked and reported on a real three-broker cluster; the cluster's
replication factor adopted when none is configured; a client started against a replicated
topic whose minimum in-sync set is 1 says so."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic, TopicMetadata

from runtrail.config import Settings
from runtrail.kafka import topics as topics_module
from runtrail.kafka.client_log import client_logger
from runtrail.kafka.durability import Replication, WeakTopic, warn_weak_topics
from runtrail.kafka.topics import (
    Difference,
    delete_topics,
    describe_topic_configs,
    design_topic_names,
    design_topics,
    ensure_design_topics,
    wait_for_topics,
)
from runtrail.publisher import Publisher
from runtrail_tools.cli.main import main
from runtrail_tools.kafka.cluster import LocalCluster
from tests.support import ServiceProcess, wait_for

WANT_MIN_ISR = "min.insync.replicas"
UNCLEAN = "unclean.leader.election.enable"


def test_the_minimum_in_sync_set_follows_the_replication_factor() -> None:
    for factor, min_isr in ((1, "1"), (2, "2"), (3, "2"), (5, "2")):
        for spec in design_topics(Settings(), factor):
            assert spec.replication_factor == factor
            assert spec.config[WANT_MIN_ISR] == min_isr, (factor, spec.name)
            assert spec.config[UNCLEAN] == "false"


# --- on a three-broker cluster -------------------------------------------------------------


@pytest.fixture
def admin(kafka_cluster: LocalCluster) -> AdminClient:
    return AdminClient(
        {"bootstrap.servers": kafka_cluster.bootstrap_servers, "logger": client_logger()}
    )


@pytest.fixture
def settings(kafka_cluster: LocalCluster, admin: AdminClient) -> Iterator[Settings]:
    """Settings whose five topics belong to this test alone (deleted afterwards)."""
    prefix = f"rt-{uuid.uuid4().hex[:10]}"
    made = Settings(
        bootstrap_servers=kafka_cluster.bootstrap_servers,
        events_topic=f"{prefix}.events",
        dlq_topic=f"{prefix}.events.dlq",
        resume_cache_topic=f"{prefix}.resume-cache",
        sessions_topic=f"{prefix}.sessions",
        audit_topic=f"{prefix}.audit",
        otlp_raw_topic=f"{prefix}.otlp-raw",
        partitions=3,
    )
    yield made
    delete_topics(admin, [spec.name for spec in design_topics(made)])


def _create(admin: AdminClient, name: str, replication: int, config: dict[str, str]) -> None:
    """Create ``name`` and wait until every broker of the cluster lists it: a client asks any
    one of them, and a broker that has not yet applied the new topic's metadata answers without
    it."""
    topic = NewTopic(name, num_partitions=3, replication_factor=replication, config=config)
    admin.create_topics([topic])[name].result(30)
    _listed_everywhere(admin, [name])


def _listed_everywhere(admin: AdminClient, names: list[str]) -> None:
    """Wait until every broker of the cluster lists ``names``: the next metadata request may go
    to any of them."""
    wait_for_topics(admin, names, timeout=30)
    for broker in admin.list_topics(timeout=30).brokers.values():
        one = AdminClient({"bootstrap.servers": f"{broker.host}:{broker.port}"})
        wait_for_topics(one, names, timeout=30)


def _cli(settings: Settings, *extra: str) -> int:
    env_free = [
        "topics",
        "ensure",
        "--bootstrap-servers",
        settings.bootstrap_servers,
        "--events-topic",
        settings.events_topic,
        "--partitions",
        "3",
        *extra,
    ]
    return main(env_free)


@pytest.mark.kafka
def test_ensure_adopts_the_clusters_replication_and_sets_durability(
    settings: Settings,
    admin: AdminClient,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fields = ("dlq_topic", "resume_cache_topic", "sessions_topic", "audit_topic", "otlp_raw_topic")
    for field in fields:
        monkeypatch.setenv(f"RUNTRAIL_{field.upper()}", getattr(settings, field))
    assert _cli(settings) == 0
    out = capsys.readouterr().out
    assert out.count("created") == 7  # the design's five and the scaled-out OTLP ingest's two
    assert "replication factor 3 (the brokers' default.replication.factor)" in out

    # this client may ask a broker whose metadata has not caught up with the controller yet
    _listed_everywhere(admin, design_topic_names(settings))
    metadata = admin.list_topics(timeout=10).topics
    configs = describe_topic_configs(admin, design_topic_names(settings), timeout=30)
    for name in design_topic_names(settings):
        assert {len(p.replicas) for p in metadata[name].partitions.values()} == {3}, name
        assert configs[name][WANT_MIN_ISR] == "2", name
        assert configs[name][UNCLEAN] == "false", name

    # again, without a replication factor: every topic is ok, none "differs"
    assert _cli(settings) == 0
    again = capsys.readouterr().out
    assert again.count(" ok ") == 7
    assert "replication factor 3 (that of the existing topics)" in again


@pytest.mark.kafka
def test_drift_in_each_durability_setting_is_reported_and_left_alone(
    settings: Settings, admin: AdminClient
) -> None:
    events, audit = settings.events_topic, settings.audit_topic
    sized = design_topics(settings, 2)[0].config["max.message.bytes"]
    _create(
        admin,
        events,
        2,
        {
            "message.timestamp.type": "LogAppendTime",
            "retention.ms": "-1",
            "max.message.bytes": sized,
            WANT_MIN_ISR: "1",
            UNCLEAN: "true",
        },
    )
    report = ensure_design_topics(admin, settings, timeout=30)
    outcomes = report.by_name()
    # the replication factor of the existing topic is adopted for the new ones
    assert report.replication is not None and report.replication.factor == 2
    assert report.replication.source == "that of the existing topics"
    assert set(outcomes[events].differences) == {
        Difference(WANT_MIN_ISR, "2", "1"),
        Difference(UNCLEAN, "false", "true"),
    }
    assert outcomes[audit].status == "created"
    _listed_everywhere(admin, [audit])
    assert {
        len(p.replicas) for p in admin.list_topics(timeout=10).topics[audit].partitions.values()
    } == {2}
    # a configured factor wins, and the existing topic is reported on it too
    configured = settings.model_copy(update={"replication_factor": 3})
    report = ensure_design_topics(admin, configured, timeout=30)
    assert Difference("replication.factor", "3", "2") in report.by_name()[events].differences
    assert report.by_name()[audit].status == "differs"
    # reported, not altered
    assert describe_topic_configs(admin, [events], timeout=30)[events][UNCLEAN] == "true"


@pytest.mark.kafka
def test_a_listing_that_lacks_a_topic_just_created_is_not_taken_for_its_absence(
    settings: Settings, admin: AdminClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker answers a listing from its own copy of the metadata, which may lag the
    controller's by seconds on a loaded cluster; ``topics ensure`` asks the controller about
    what the listing lacks before it adopts a replication factor or creates anything."""
    events = settings.events_topic
    _create(admin, events, 2, {WANT_MIN_ISR: "2"})
    real_listing = topics_module.list_topic_metadata
    lagging: list[str] = []

    def lagging_broker(client: AdminClient, timeout: float) -> dict[str, TopicMetadata]:
        topics = real_listing(client, timeout)
        if not lagging:  # the first listing comes from a broker that has not applied it yet
            lagging.append(events)
            topics.pop(events)
        return topics

    monkeypatch.setattr(topics_module, "list_topic_metadata", lagging_broker)
    report = ensure_design_topics(admin, settings, timeout=30)
    assert lagging == [events], "the stand-in for the lagging broker answered"
    assert report.replication == Replication(2, "that of the existing topics")
    outcome = report.by_name()[events]
    assert outcome.status == "differs", outcome  # compared (its configs are not the design's)
    assert "replication.factor" not in {d.item for d in outcome.differences}, outcome
    assert report.by_name()[settings.audit_topic].status == "created"


@pytest.mark.kafka
def test_a_client_started_against_a_replicated_topic_with_min_isr_1_warns(
    settings: Settings,
    admin: AdminClient,
    kafka_cluster: LocalCluster,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    events = settings.events_topic
    _create(admin, events, 3, {WANT_MIN_ISR: "1"})
    _create(admin, settings.audit_topic, 3, {WANT_MIN_ISR: "2"})
    expected = WeakTopic(events, 3, 1)
    # the check's own 5 s bound is a start-time courtesy; under a loaded CI the brokers may need more
    found = warn_weak_topics(settings, design_topic_names(settings), "check", timeout=30)
    assert found == [expected]

    caplog.set_level(logging.WARNING, logger="runtrail.kafka.durability")
    publisher = Publisher(settings.model_copy(update={"spool_dir": tmp_path / "spool"}))
    try:
        wait_for(lambda: str(expected) in caplog.text, 30, what="the publisher's warning")
    finally:
        publisher.close()
    assert f"publisher: {expected}" in caplog.text
    assert settings.audit_topic not in caplog.text  # min ISR 2: nothing to say

    log_path = tmp_path / "noop.log"
    service = ServiceProcess(
        "noop",
        kafka_cluster.bootstrap_servers,
        events,
        group=f"g-{uuid.uuid4().hex[:6]}",
        env={"RUNTRAIL_AUDIT_TOPIC": settings.audit_topic},
        log_path=log_path,
    )
    try:
        wait_for(lambda: str(expected) in log_path.read_text(), 60, what="the service's warning")
        assert service.alive(), "a weak topic is warned about, not refused"
        assert service.terminate() == 0
    finally:
        service.close()
