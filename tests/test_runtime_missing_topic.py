"""A service started before its topic exists says so: ``/readyz`` and the log name the topic
and what to do, and it takes its partitions as soon as the topic is created.

A tester following OPERATIONS.md started the projector on a mistyped topic: the log said only
``consuming <topic>`` and ``/readyz`` a bare ``not ready`` for as long as it ran (librdkafka
hands the consumer an "unknown topic" error, which the runtime passed over)."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient

from runtrail.kafka.topics import delete_topics
from tests.support import (
    ServiceProcess,
    create_topic,
    form,
    produce_forms,
    read_lines,
    unique_topic,
    wait_for,
)


def test_a_service_on_a_topic_that_does_not_exist_names_it_until_it_does(
    kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    topic = unique_topic("missing")
    output = tmp_path / "noop.txt"
    log = tmp_path / "noop.log"
    service = ServiceProcess(
        "noop",
        kafka_bootstrap,
        topic,
        group=f"{topic}-g",
        options={"output": str(output)},
        env={"RUNTRAIL_STATE_DIR": str(tmp_path / "state")},
        log_path=log,
    )
    try:
        answers: list[tuple[int, str]] = []

        def names_the_topic() -> bool:
            answers.append(service.get("/readyz"))
            return f"topic {topic} does not exist on {kafka_bootstrap}" in answers[-1][1]

        wait_for(names_the_topic, 60, 0.5, what="/readyz naming the missing topic")
        assert answers[-1][0] == 503
        assert "runtrail topics ensure" in answers[-1][1]
        assert f"topic {topic} does not exist" in log.read_text()
        metrics = service.get("/metrics")[1]
        assert 'what="topic"} 1.0' in metrics, metrics[-2000:]

        create_topic(kafka_bootstrap, topic, partitions=2)
        wait_for(lambda: service.get("/readyz")[0] == 200, 90, 0.5, what="ready once it exists")
        produce_forms(kafka_bootstrap, topic, [form(run_id="r-1", sequence=1)])
        wait_for(lambda: len(read_lines(output)) == 1, 60, what="the event processed")
        assert f"topic {topic} exists now" in log.read_text()
        assert service.terminate() == 0
    finally:
        service.close()
        delete_topics(kafka_admin, [topic])
