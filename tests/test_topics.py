"""The design's topics: specs from settings, then create / check against a real broker."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from runtrail.config import Settings
from runtrail.kafka.topics import (
    Difference,
    EnsureReport,
    TopicOutcome,
    TopicSpec,
    delete_topics,
    describe_topic_configs,
    design_topics,
    ensure_topics,
    wait_for_topics,
)
from runtrail_tools.cli.main import main
from tests.kafka_fixture import TopicFactory

COMPACTED_ROLES = {"resume-cache", "sessions", "otlp-traces"}

# --- without a broker ---------------------------------------------------------------------


def test_design_has_the_seven_topics_of_the_design() -> None:
    settings = Settings(partitions=4, replication_factor=1, events_retention_ms=86_400_000)
    specs = {s.role: s for s in design_topics(settings)}
    roles = {"events", "dlq", "resume-cache", "sessions", "audit", "otlp-raw", "otlp-traces"}
    assert set(specs) == roles
    assert specs["otlp-traces"].name == f"{settings.otlp_raw_topic}.traces"
    assert specs["events"].name == settings.events_topic
    sized = {
        "max.message.bytes": str(settings.max_event_bytes + 256 * 1024),
        "min.insync.replicas": "1",
        "unclean.leader.election.enable": "false",
    }
    assert specs["events"].config == {
        "message.timestamp.type": "LogAppendTime",
        "retention.ms": "86400000",
        **sized,
    }
    for role in COMPACTED_ROLES:
        assert specs[role].config == {"cleanup.policy": "compact", **sized}
    assert specs["dlq"].config == sized and specs["audit"].config == sized
    assert specs["otlp-raw"].config == {
        "message.timestamp.type": "LogAppendTime",
        "retention.ms": str(7 * 24 * 3600 * 1000),
        **sized,
    }
    assert {s.partitions for s in specs.values()} == {4}
    assert {s.replication_factor for s in specs.values()} == {1}


def test_report_table_lists_every_difference() -> None:
    spec = TopicSpec("t.sessions", 3, config={"cleanup.policy": "compact"})
    report = EnsureReport(
        (
            TopicOutcome(TopicSpec("t.events", 3), "created"),
            TopicOutcome(
                spec,
                "differs",
                (
                    Difference("partitions", "3", "2"),
                    Difference("cleanup.policy", "compact", "delete"),
                ),
            ),
        )
    )
    table = report.format_table()
    assert report.has_differences
    assert "partitions: want 3, have 2" in table
    assert "cleanup.policy: want compact, have delete" in table
    assert [o.name for o in report.with_status("created")] == ["t.events"]


# --- with a broker ------------------------------------------------------------------------


@pytest.fixture
def unique_settings(kafka_bootstrap: str, kafka_admin: AdminClient) -> Iterator[Settings]:
    """Settings whose seven topic names belong to this test alone (deleted afterwards)."""
    prefix = f"rt-{uuid.uuid4().hex[:10]}"
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=f"{prefix}.events",
        dlq_topic=f"{prefix}.events.dlq",
        resume_cache_topic=f"{prefix}.resume-cache",
        sessions_topic=f"{prefix}.sessions",
        audit_topic=f"{prefix}.audit",
        otlp_raw_topic=f"{prefix}.otlp-raw",
        partitions=3,
    )
    yield settings
    delete_topics(kafka_admin, [s.name for s in design_topics(settings)])


@pytest.mark.kafka
def test_ensure_creates_the_topics_with_their_configs_then_finds_them_ok(
    kafka_admin: AdminClient, unique_settings: Settings
) -> None:
    specs = design_topics(unique_settings)
    first = ensure_topics(kafka_admin, specs)
    assert [o.status for o in first.outcomes] == ["created"] * 7

    metadata = kafka_admin.list_topics(timeout=10).topics
    configs = describe_topic_configs(kafka_admin, [s.name for s in specs], timeout=30)
    for spec in specs:
        assert len(metadata[spec.name].partitions) == 3
        policy = configs[spec.name]["cleanup.policy"]
        assert policy == ("compact" if spec.role in COMPACTED_ROLES else "delete"), spec.name
    events = configs[unique_settings.events_topic]
    assert events["message.timestamp.type"] == "LogAppendTime"
    assert events["retention.ms"] == "-1"
    assert configs[unique_settings.dlq_topic]["message.timestamp.type"] == "CreateTime"

    second = ensure_topics(kafka_admin, specs)
    assert [o.status for o in second.outcomes] == ["ok"] * 7
    assert not second.has_differences


@pytest.mark.kafka
def test_a_topic_made_by_hand_differently_is_reported_and_left_alone(
    kafka_admin: AdminClient, unique_settings: Settings
) -> None:
    sessions = unique_settings.sessions_topic
    kafka_admin.create_topics([NewTopic(sessions, num_partitions=2)])[sessions].result(30)
    wait_for_topics(kafka_admin, [sessions], timeout=30)

    report = ensure_topics(kafka_admin, design_topics(unique_settings))
    outcomes = report.by_name()
    assert report.has_differences
    assert outcomes[sessions].status == "differs"
    assert set(outcomes[sessions].differences) == {
        Difference("partitions", "3", "2"),
        Difference("cleanup.policy", "compact", "delete"),
        Difference(
            "max.message.bytes", str(unique_settings.max_event_bytes + 256 * 1024), "1048588"
        ),
    }
    assert {o.status for name, o in outcomes.items() if name != sessions} == {"created"}

    # Reported, not altered.
    assert len(kafka_admin.list_topics(timeout=10).topics[sessions].partitions) == 2
    configs = describe_topic_configs(kafka_admin, [sessions], timeout=30)
    assert configs[sessions]["cleanup.policy"] == "delete"


@pytest.mark.kafka
def test_cli_topics_ensure_exits_1_when_a_topic_differs(
    unique_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for field in (
        "dlq_topic",
        "resume_cache_topic",
        "sessions_topic",
        "audit_topic",
        "otlp_raw_topic",
    ):
        monkeypatch.setenv(f"RUNTRAIL_{field.upper()}", getattr(unique_settings, field))
    base = [
        "topics",
        "ensure",
        "--bootstrap-servers",
        unique_settings.bootstrap_servers,
        "--events-topic",
        unique_settings.events_topic,
        "--partitions",
        "3",
    ]
    assert main(base) == 0
    assert capsys.readouterr().out.count("created") == 7
    assert main(base) == 0
    assert capsys.readouterr().out.count(" ok ") == 7
    assert main([*base[:-1], "2"]) == 1
    captured = capsys.readouterr()
    assert captured.out.count("partitions: want 2, have 3") == 7
    assert "left as they are" in captured.err


@pytest.mark.kafka
def test_topic_factory_makes_ready_topics(
    kafka_topic_factory: TopicFactory, kafka_admin: AdminClient
) -> None:
    name = kafka_topic_factory(4, config={"cleanup.policy": "compact"})
    assert name.startswith("test_topic_factory_makes_ready_topics-")
    topic = kafka_admin.list_topics(timeout=10).topics[name]
    assert len(topic.partitions) == 4
    assert all(p.leader >= 0 for p in topic.partitions.values())
    assert describe_topic_configs(kafka_admin, [name], 30)[name]["cleanup.policy"] == "compact"
