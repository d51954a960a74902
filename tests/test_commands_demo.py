"""The deploy run takes its approval through the command API from a second process; the
second operator's approval of the same observed version is refused as stale. Every process is
real: the command API and the outbox relay (``runtrail run``), the operators (``runtrail
command approve``), PostgreSQL and Kafka."""

from __future__ import annotations

import json
from pathlib import Path

from runtrail.commands.client import CommandClient
from runtrail.events import EventCodec
from runtrail.persistence import COMMAND_EVENTS, open_store
from runtrail.projection import replay_runs
from runtrail_tools.demo.approval import run_deploy, two_operators
from runtrail_tools.kafka.ports import free_ports
from tests.kafka_fixture import TopicFactory
from tests.support import ServiceProcess, consume_all, wait_for

TOKEN = "tok-acme-demo"


def test_the_deploy_run_is_approved_from_a_second_process_and_a_stale_approval_refused(
    postgres_url: str, kafka_bootstrap: str, kafka_topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topic = kafka_topic_factory(3)
    port = free_ports(1)[0]
    api = ServiceProcess(
        "command-api",
        kafka_bootstrap,
        topic,
        group="unused",
        options={
            "store": postgres_url,
            "http_port": str(port),
            "tokens": json.dumps({"acme": TOKEN}),
        },
        log_path=tmp_path / "api.log",
    )
    relay = ServiceProcess(
        "outbox-relay", kafka_bootstrap, topic, group="unused",
        options={"store": postgres_url, "idle_poll_s": "0.05"}, log_path=tmp_path / "relay.log",
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    client = CommandClient(url, TOKEN)
    store = open_store(COMMAND_EVENTS, postgres_url)
    try:
        wait_for(
            lambda: (
                (tmp_path / "api.log").exists() and "/v1/runs" in (tmp_path / "api.log").read_text()
            ),
            60,
            what="the command API",
        )
        report = run_deploy(
            client, "deploy-1", two_operators(url, TOKEN, "deploy-1"), say=lambda _: None
        )
        first, second = report.operators
        assert first["exit"] == 0, first["stderr"]
        assert json.loads(first["stdout"])["accepted"] is True
        assert second["exit"] == 1 and "refused (stale)" in second["stderr"]
        assert json.loads(second["stdout"])["version"] == json.loads(first["stdout"])["version"]
        assert report.final_status == "succeeded"
        relay.metrics_port()  # started, its signal handlers installed
        wait_for(lambda: store.outbox_size() == 0, 60, 0.1, what="the relay")
        assert api.terminate() == 0 and relay.terminate() == 0
    finally:
        api.close()
        relay.close()
        store.close()
    codec = EventCodec()
    events = [
        codec.decode(m.value()).event
        for m in consume_all(kafka_bootstrap, topic, expect=report.version)
    ]
    folded = replay_runs(events)
    assert folded.projections[("acme", "deploy-1")].status == "succeeded"
    grants = [e for e in events if e.type == "run.approval_granted"]
    assert len(grants) == 1 and grants[0].data.approved_by == "oncall@acme"  # type: ignore[attr-defined]
    assert grants[0].actor.kind == "operator"
