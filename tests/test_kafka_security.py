"""Secured Kafka end to end: real brokers with SASL_SSL/SCRAM-SHA-512 and with mutual TLS,
KRaft's StandardAuthorizer, and one principal per runtrail process with only its ACLs.

Each mode gets its own local broker (``LocalBroker`` with :class:`BrokerSecurity`: the CA,
certificates and passwords generated into its home), its topics made by ``runtrail topics
ensure`` as the admin, and the ACL table of ``runtrail kafka acls`` applied. Then:

* the publisher (as ``runtrail-agent``), ``runtrail run audit`` and ``runtrail run capture``
  (each as itself, secrets read from files) carry events end to end;
* the agent's principal writes the events topic but can neither read it nor write the audit or
  cache topics;
* a wrong password, a client certificate from another CA and a broker certificate the client
  does not trust each fail at once with one error naming the broker and the mechanism: the
  service exits instead of retrying, the command exits 2;
* a SCRAM password changed on the broker and in its file is used after a restart.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from prometheus_client import CollectorRegistry

from bench.workload import run_events
from runtrail.config import Settings, read_option_files
from runtrail.kafka.client_log import client_logger
from runtrail.persistence.urls import sqlite_url
from runtrail.publisher import Publisher
from runtrail_tools.kafka import acls
from runtrail_tools.kafka.broker import BrokerError, LocalBroker
from runtrail_tools.kafka.pki import Authority
from runtrail_tools.kafka.ports import free_ports
from runtrail_tools.kafka.security import ADMIN_PRINCIPAL, BrokerSecurity, Mode
from tests.kafka_fixture import unavailable
from tests.support import ServiceProcess, wait_for

pytestmark = [pytest.mark.kafka]

PARTITIONS = 3
REFUSED = "refused the connection"


@dataclass
class Secured:
    """A secured broker, its topic names and the ACLs of every runtrail principal applied."""

    mode: Mode
    broker: LocalBroker
    security: BrokerSecurity
    settings: Settings  # topic names and bootstrap, no credentials
    group_prefix: str

    def topic_env(self) -> dict[str, str]:
        s = self.settings
        return {
            "RUNTRAIL_EVENTS_TOPIC": s.events_topic,
            "RUNTRAIL_DLQ_TOPIC": s.dlq_topic,
            "RUNTRAIL_AUDIT_TOPIC": s.audit_topic,
            "RUNTRAIL_SESSIONS_TOPIC": s.sessions_topic,
            "RUNTRAIL_RESUME_CACHE_TOPIC": s.resume_cache_topic,
        }

    def env(self, principal: str, **replace_files: str) -> dict[str, str]:
        """The environment of a process running as ``principal`` (a file swapped if asked)."""
        client = self.security.client(principal)
        env = client.environment(self.broker.bootstrap_servers)
        if replace_files:
            env["RUNTRAIL_KAFKA_OPTION_FILES"] = json.dumps(
                {**client.option_files, **replace_files}
            )
        return {**self.topic_env(), **env}

    def settings_as(self, principal: str, **more: Any) -> Settings:
        client = self.security.client(principal)
        return self.settings.model_copy(
            update={
                "kafka_options": client.options,
                "kafka_option_files": {k: Path(v) for k, v in client.option_files.items()},
                **more,
            }
        )

    def client_config(self, principal: str, **more: Any) -> dict[str, Any]:
        client = self.security.client(principal)
        return {
            "bootstrap.servers": self.broker.bootstrap_servers,
            **client.options,
            **read_option_files(client.option_files),
            "logger": client_logger("tests.kafka_security"),
            **more,
        }


def runtrail(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``runtrail …`` as a child process with ``env`` over the test's environment."""
    return subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_secured(home: Path, security_of: Any) -> LocalBroker:
    last: BrokerError | None = None
    defaults = Settings()
    for _ in range(2):  # a free port can be taken between picking and binding: retry once
        port, controller_port = free_ports(2)
        broker = LocalBroker(
            home=home,
            port=port,
            controller_port=controller_port,
            cache_dir=defaults.kafka_cache_dir,
            jvm_options=defaults.kafka_jvm_options.split(),
            security=security_of(home),
        )
        try:
            broker.start(timeout=180)
        except BrokerError as exc:
            last = exc
            if "already in use" not in str(exc):
                break
        else:
            return broker
    unavailable(f"the secured local broker did not start: {last}")


@pytest.fixture(scope="module", params=["scram", "mtls"])
def secured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    mode: Mode = request.param
    tag = uuid.uuid4().hex[:8]
    events = f"sec-{mode}-{tag}"
    settings = Settings(
        events_topic=events,
        dlq_topic=f"{events}.dlq",
        audit_topic=f"{events}.audit",
        sessions_topic=f"{events}.sessions",
        resume_cache_topic=f"{events}.cache",
    )
    home = tmp_path_factory.mktemp(f"kafka-{mode}")
    broker = start_secured(home, lambda h: BrokerSecurity(h, mode, acls.principals(settings)))
    try:
        assert broker.security is not None
        settings = settings.model_copy(update={"bootstrap_servers": broker.bootstrap_servers})
        cluster = Secured(mode, broker, broker.security, settings, f"sec-{tag}")
        ensured = runtrail(
            cluster.env(ADMIN_PRINCIPAL), "topics", "ensure", "--partitions", str(PARTITIONS)
        )
        assert ensured.returncode == 0, ensured.stderr
        assert ensured.stdout.count("created") == 7, ensured.stdout  # + the OTLP ingest's two
        admin = AdminClient(cluster.client_config(ADMIN_PRINCIPAL))
        acls.apply(admin, acls.roles(settings, group_prefix=cluster.group_prefix))
        yield cluster
    finally:
        broker.stop()


def publish(settings: Settings, runs: int, tmp: Path) -> tuple[int, Publisher]:
    """``runs`` short agent runs through a Publisher; the number of events accepted."""
    rng = random.Random(3)
    count = 0
    publisher = Publisher(
        settings.model_copy(update={"spool_dir": tmp / f"spool-{uuid.uuid4().hex[:6]}"}),
        registry=CollectorRegistry(),
    )
    for run in range(runs):
        for form in run_events(f"run-{run}", rng, tenant="acme", steps=2):
            assert publisher.on_event(form) is not None
            count += 1
    return count, publisher


def service(
    cluster: Secured, name: str, tmp: Path, env: dict[str, str], **options: str
) -> ServiceProcess:
    return ServiceProcess(
        name,
        cluster.broker.bootstrap_servers,
        cluster.settings.events_topic,
        group=f"{cluster.group_prefix}.{name}",
        options=options,
        env={**env, "RUNTRAIL_STATE_DIR": str(tmp / f"state-{name}")},
        log_path=tmp / f"{name}.log",
    )


def test_publisher_services_and_cli_end_to_end_each_with_only_its_acls(
    secured: Secured, tmp_path: Path
) -> None:
    cluster = secured
    admin_env = cluster.env(ADMIN_PRINCIPAL)
    again = runtrail(admin_env, "topics", "ensure", "--partitions", str(PARTITIONS))
    assert again.returncode == 0, again.stderr
    applied = runtrail(
        admin_env, "kafka", "acls", "--apply", "--group-prefix", cluster.group_prefix
    )
    assert applied.returncode == 0, applied.stderr

    count, publisher = publish(cluster.settings_as("runtrail-agent"), runs=3, tmp=tmp_path)
    with publisher:
        assert publisher.flush(60) == 0
    assert publisher.refused is None

    own_options: dict[str, dict[str, str]] = {
        "audit": {"store_url": sqlite_url(tmp_path / "audit.db")},
        "capture": {"sink_url": (tmp_path / "capture").as_uri()},
        "sessions": {"http_port": "0"},
        "resume-cache": {"http_port": "0"},
        "projector": {},
    }
    assert set(own_options) == set(acls.CONSUMER_OUTPUTS)  # every consumer service runs
    procs = [
        service(cluster, name, tmp_path, cluster.env(acls.principal_name(name)), **options)
        for name, options in own_options.items()
    ]
    try:
        for proc in procs:
            wait_for(lambda p=proc: p.processed() >= count, 180, what=f"{proc.service} to consume")
            assert proc.processed() == count
    finally:
        codes = {p.service: p.terminate() for p in procs}
    assert codes == dict.fromkeys(own_options, 0), [
        (p.log_path.read_text() if p.log_path else "")[-3000:] for p in procs
    ]
    for proc in procs:  # nothing refused along the way
        log = proc.log_path.read_text() if proc.log_path else ""
        assert "AUTHORIZATION_FAILED" not in log and REFUSED not in log, log[-3000:]
    # the audit service sealed and published links with its own principal
    reader = Consumer(cluster.client_config(ADMIN_PRINCIPAL, **{"group.id": f"r-{uuid.uuid4()}"}))
    try:
        ends = [
            reader.get_watermark_offsets(
                TopicPartition(cluster.settings.audit_topic, p), timeout=10
            )[1]
            for p in range(PARTITIONS)
        ]
    finally:
        reader.close()
    assert sum(ends) > 0


def refusal(err: KafkaError | None) -> int | None:
    return None if err is None else err.code()


def test_the_agent_writes_events_but_cannot_read_them_nor_write_other_topics(
    secured: Secured,
) -> None:
    cluster = secured
    s = cluster.settings
    outcomes: dict[str, int | None] = {}

    def report(err: KafkaError | None, msg: Any) -> None:
        outcomes[msg.topic()] = refusal(err)

    producer = Producer(
        cluster.client_config("runtrail-agent", **{"message.timeout.ms": 20000, "acks": "all"})
    )
    for topic in (s.events_topic, s.audit_topic, s.resume_cache_topic):
        producer.produce(topic, key=b"k", value=b"v", on_delivery=report)
    assert producer.flush(30) == 0
    assert outcomes == {
        s.events_topic: None,
        s.audit_topic: KafkaError.TOPIC_AUTHORIZATION_FAILED,
        s.resume_cache_topic: KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }

    consumer = Consumer(
        cluster.client_config(
            "runtrail-agent",
            **{"group.id": f"agent-{uuid.uuid4()}", "enable.auto.commit": False},
        )
    )
    try:
        consumer.assign([TopicPartition(s.events_topic, p, 0) for p in range(PARTITIONS)])
        # a refused group (the agent has none) may come first; the topic's refusal must come
        errors: list[int] = []
        deadline = time.monotonic() + 30
        while KafkaError.TOPIC_AUTHORIZATION_FAILED not in errors and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            assert msg is None or msg.error() is not None, "the agent read an event"
            if msg is not None and msg.error() is not None:
                errors.append(msg.error().code())
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in errors, errors
    finally:
        consumer.close()


def bad_credentials(
    cluster: Secured, tmp: Path, principal: str = "runtrail-audit"
) -> tuple[dict[str, str], str]:
    """``principal``'s environment with credentials the broker refuses, and the words that
    name its mechanism."""
    if cluster.mode == "scram":
        wrong = tmp / "wrong-password"
        wrong.write_text("not-the-password\n")
        return cluster.env(principal, **{"sasl.password": str(wrong)}), "SCRAM-SHA-512"
    foreign = Authority(tmp / "foreign-ca").identity(principal)
    env = cluster.env(principal, **{"ssl.key.password": str(foreign.key_password)})
    options = json.loads(env["RUNTRAIL_KAFKA_OPTIONS"])
    options["ssl.certificate.location"] = str(foreign.certificate)
    options["ssl.key.location"] = str(foreign.key)
    env["RUNTRAIL_KAFKA_OPTIONS"] = json.dumps(options)
    return env, f"client certificate {foreign.certificate}"


def test_refused_credentials_fail_fast_with_one_error_naming_broker_and_mechanism(
    secured: Secured, tmp_path: Path
) -> None:
    cluster = secured
    broker = cluster.broker.bootstrap_servers
    env, mechanism = bad_credentials(cluster, tmp_path)

    started = time.monotonic()
    proc = service(cluster, "audit", tmp_path, env, store_url=sqlite_url(tmp_path / "audit.db"))
    code = proc.proc.wait(60)
    took = time.monotonic() - started
    log = proc.log_path.read_text() if proc.log_path else ""
    named = [line for line in log.splitlines() if REFUSED in line]
    assert code == 1, log[-3000:]
    assert took < 45, f"the service took {took:.0f}s to give up"
    assert len(named) <= 2, named  # the service's error, and the client's own report of it
    assert any(f"Kafka broker {broker} {REFUSED}" in line and mechanism in line for line in named)
    assert any("audit: Kafka broker" in line and "stopping" in line for line in named), named
    assert log.count("|FAIL|") == 0  # no raw librdkafka lines

    started = time.monotonic()
    ensure = runtrail(env, "topics", "ensure", "--partitions", str(PARTITIONS))
    assert ensure.returncode == 2
    assert time.monotonic() - started < 30
    lines = ensure.stderr.strip().splitlines()
    assert len(lines) == 1, ensure.stderr
    assert f"Kafka broker {broker} {REFUSED}" in lines[0] and mechanism in lines[0]


def test_a_broker_certificate_the_client_does_not_trust_fails_fast(
    secured: Secured, tmp_path: Path
) -> None:
    cluster = secured
    other = Authority(tmp_path / "other-ca")
    other.ensure()
    env = cluster.env(ADMIN_PRINCIPAL)
    options = json.loads(env["RUNTRAIL_KAFKA_OPTIONS"])
    options["ssl.ca.location"] = str(other.certificate)
    env["RUNTRAIL_KAFKA_OPTIONS"] = json.dumps(options)
    started = time.monotonic()
    ensure = runtrail(env, "topics", "ensure", "--partitions", str(PARTITIONS))
    assert ensure.returncode == 2
    assert time.monotonic() - started < 30
    lines = ensure.stderr.strip().splitlines()
    assert len(lines) == 1, ensure.stderr
    assert f"Kafka broker {cluster.broker.bootstrap_servers} {REFUSED}" in lines[0]
    assert "certificate verify failed" in lines[0]


@pytest.mark.parametrize("secured", ["scram"], indirect=True)
def test_a_changed_scram_password_is_used_after_a_restart(secured: Secured, tmp_path: Path) -> None:
    cluster = secured
    principal = "runtrail-otlp-ingest"  # writes the events topic, like the agent
    password_file = cluster.security.scram_password_file(principal)
    admin = AdminClient(cluster.client_config(ADMIN_PRINCIPAL))
    new_password = f"rotated-{uuid.uuid4().hex}"
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    change = UserScramCredentialUpsertion(principal, info, new_password.encode())
    for future in admin.alter_user_scram_credentials([change]).values():
        future.result(30)

    # the running deployment still has the old password in its file: refused, told once
    stale_count, stale = publish(cluster.settings_as(principal), runs=1, tmp=tmp_path)
    wait_for(lambda: stale.refused is not None, 30, what="the refusal")
    assert "SCRAM-SHA-512" in (stale.refused or "")
    stale.close(timeout=1)

    password_file.write_text(new_password + "\n")  # the Secret updated; then a restart
    count, fresh = publish(cluster.settings_as(principal), runs=1, tmp=tmp_path)
    with fresh:
        assert fresh.flush(60) == 0
    assert fresh.refused is None
    assert count == stale_count


def events_on(cluster: Secured, topic: str) -> int:
    """How many records ``topic`` holds (its end offsets, read as the admin)."""
    reader = Consumer(cluster.client_config(ADMIN_PRINCIPAL, **{"group.id": f"r-{uuid.uuid4()}"}))
    try:
        return sum(
            reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        )
    finally:
        reader.close()


def test_unconfirmed_events_are_resent_by_an_agent_that_may_not_read_the_topic(
    secured: Secured, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent's spool after an outage: its recovery look-up is refused (no Read), so the
    unconfirmed events are resent unchecked rather than held forever."""
    cluster = secured
    agent = cluster.settings_as("runtrail-agent", spool_dir=tmp_path / "spool")
    (closed,) = free_ports(1)
    outage = agent.model_copy(update={"bootstrap_servers": f"127.0.0.1:{closed}"})
    rng = random.Random(9)
    with Publisher(agent, registry=CollectorRegistry()) as first:  # the topic is not empty
        for form in run_events("run-before", rng, tenant="acme", steps=1):
            assert first.on_event(form) is not None
        assert first.flush(60) == 0
    before = events_on(cluster, cluster.settings.events_topic)
    forms = list(run_events("run-outage", rng, tenant="acme", steps=2))
    with Publisher(outage, registry=CollectorRegistry()) as down:
        for form in forms:
            assert down.on_event(form) is not None
        down.close(timeout=1)  # nothing acknowledged: all of it stays in the spool

    with (
        caplog.at_level("WARNING", logger="runtrail.publisher"),
        Publisher(agent, registry=CollectorRegistry()) as back,
    ):
        assert back.flush(60) == 0
        assert back.refused is None
    assert events_on(cluster, cluster.settings.events_topic) == before + len(forms)
    assert "may not read" in caplog.text


def test_the_ai4j_adapter_publishes_as_the_agent_from_its_properties_file(
    secured: Secured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Java adapter, configured by the ``clients/runtrail-agent.properties`` that ``kafka up
    --security`` writes (secrets read through Kafka's DirectoryConfigProvider)."""
    from tests.ai4j_adapter import adapter

    built = adapter()
    cluster = secured
    bootstrap = cluster.broker.bootstrap_servers
    folder = cluster.security.write_client_files(bootstrap)
    properties = folder / "runtrail-agent.properties"
    secrets = [
        Path(f).read_text().strip()
        for f in cluster.security.client("runtrail-agent").option_files.values()
    ]
    assert not any(secret in properties.read_text() for secret in secrets)
    monkeypatch.setenv("RUNTRAIL_AI4J_KAFKA_PROPERTIES", str(properties))
    before = events_on(cluster, cluster.settings.events_topic)
    records = tmp_path / "ai4j"
    records.mkdir()
    stats = built.run("run", bootstrap, cluster.settings.events_topic, "acme", str(records), "j-1")
    assert stats["published"] == stats["accepted"] > 0, stats
    assert stats["failed"] == stats["dropped"] == stats["inFlight"] == stats["spoolDepth"] == 0
    if stats["spooled"]:
        # on a loaded machine the first TLS handshake can outlast the adapter's 5 s wait for
        # metadata: those events go through its spool, resent once the broker answers (over
        # the same authenticated connection), which is the only warning allowed
        assert stats["lastError"].startswith("spool "), stats
    else:
        assert "lastError" not in stats, stats
    assert events_on(cluster, cluster.settings.events_topic) == before + stats["published"]


def test_the_outbox_relay_and_the_explorer_each_with_only_its_acls(
    secured: Secured, tmp_path: Path
) -> None:
    """The relay writes in transactions under its transactional ID and reads the topic back
    (read-committed) at start; the explorer's live view reads a run's events in a throwaway
    group. Each as its own principal."""
    import asyncio

    from runtrail.persistence import COMMAND_EVENTS, open_store
    from runtrail.resume.partitioning import partition_for
    from runtrail_tools.ui.live import LiveHub
    from tests.commands_support import accept, command

    cluster = secured
    store_url = sqlite_url(tmp_path / "commands.db")
    store = open_store(COMMAND_EVENTS, store_url)
    run = f"relayed-{uuid.uuid4().hex[:6]}"
    assert store.execute(accept(run)).accepted
    for version in range(1, 4):
        data = {"budgetId": "b", "amount": 1.0, "unit": "usd"}
        assert store.execute(command("reserve_budget", run, version, data)).accepted
    relayed = store.outbox_size()
    before = events_on(cluster, cluster.settings.events_topic)
    relay = ServiceProcess(
        "outbox-relay",
        cluster.broker.bootstrap_servers,
        cluster.settings.events_topic,
        group="unused",
        options={"store": store_url, "idle_poll_s": "0.05"},
        env={**cluster.env("runtrail-outbox-relay"), "RUNTRAIL_STATE_DIR": str(tmp_path)},
        log_path=tmp_path / "relay.log",
    )
    try:
        wait_for(lambda: store.outbox_size() == 0, 120, what="the relay to drain the outbox")
        assert relay.terminate() == 0
    finally:
        relay.close()
        store.close()
    log = (tmp_path / "relay.log").read_text()
    assert "AUTHORIZATION_FAILED" not in log and REFUSED not in log, log[-3000:]
    # each transaction adds a commit marker: at least the events, never fewer
    assert events_on(cluster, cluster.settings.events_topic) >= before + relayed

    async def first_event() -> bytes:
        ui = cluster.settings_as("runtrail-ui")
        hub = LiveHub(ui)
        events = hub.stream("acme", run, partition_for(run, PARTITIONS), 0)
        try:
            async for chunk in events:
                if chunk.startswith(b"id: "):
                    return chunk
            raise AssertionError("the live stream ended")
        finally:
            await events.aclose()
            hub.close()

    chunk = asyncio.run(asyncio.wait_for(first_event(), 60))
    assert b"event: runtrail-event" in chunk and run.encode() in chunk


def test_the_otlp_receiver_publishes_as_its_own_principal(secured: Secured, tmp_path: Path) -> None:
    import threading

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from runtrail_services.otlp_ingest.service import OtlpIngestReceiver
    from tests.otel_support import run_agent

    cluster = secured
    settings = cluster.settings_as(
        "runtrail-otlp-ingest", spool_dir=tmp_path / "spool", state_dir=tmp_path / "state"
    )
    token = uuid.uuid4().hex
    receiver = OtlpIngestReceiver(
        settings, options={"http_port": "0", "tokens": json.dumps({"acme": token})}, metrics_port=0
    )
    thread = threading.Thread(target=receiver.run, daemon=True)
    thread.start()
    before = events_on(cluster, cluster.settings.events_topic)
    try:
        wait_for(lambda: receiver.health.ready, 30, what="receiver ready")
        exporter = OTLPSpanExporter(
            f"http://127.0.0.1:{receiver.port}/v1/traces",
            headers={"Authorization": f"Bearer {token}"},
        )
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        run_agent(provider)
        provider.shutdown()
        assert receiver.publisher.flush(30) == 0
        assert receiver.publisher.refused is None
    finally:
        receiver.request_stop()
        thread.join(30)
    assert events_on(cluster, cluster.settings.events_topic) > before


@pytest.mark.parametrize(
    ("receiver", "options"),
    [
        ("outbox-relay", ("-o", "store=sqlite:///{tmp}/commands.db")),
        ("otlp-ingest", ("-o", "http_port=0")),
    ],
)
def test_receivers_with_refused_credentials_stop_at_once(
    secured: Secured, tmp_path: Path, receiver: str, options: tuple[str, ...]
) -> None:
    cluster = secured
    env, mechanism = bad_credentials(cluster, tmp_path, acls.principal_name(receiver))
    env["RUNTRAIL_STATE_DIR"] = str(tmp_path / "state")
    started = time.monotonic()
    done = runtrail(
        env,
        "run",
        receiver,
        "--metrics-port",
        "0",
        *(o.format(tmp=tmp_path) for o in options),
        timeout=90,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert time.monotonic() - started < 45
    stopped = [line for line in done.stderr.splitlines() if f"{receiver}: Kafka broker" in line]
    assert len(stopped) == 1, done.stderr[-3000:]
    assert REFUSED in stopped[0] and mechanism in stopped[0] and "stopping" in stopped[0]


def test_kafka_up_security_prints_the_admin_settings_without_a_secret(tmp_path: Path) -> None:
    state = tmp_path / "state"
    port, controller_port = free_ports(2)
    flags = ("--state-dir", str(state))
    ports = ("--kafka-port", str(port), "--kafka-controller-port", str(controller_port))
    up = runtrail({}, "kafka", "up", "--security", "scram", *flags, *ports, timeout=240)
    try:
        if up.returncode != 0 and "did not start" in up.stderr:
            unavailable(up.stderr[-2000:])
        assert up.returncode == 0, up.stderr
        folder = state / "kafka" / "security"
        secret = (folder / "scram" / "runtrail-admin.password").read_text()
        assert secret not in up.stdout + up.stderr
        assert f"export RUNTRAIL_BOOTSTRAP_SERVERS='127.0.0.1:{port}'" in up.stdout
        assert "RUNTRAIL_KAFKA_OPTION_FILES" in up.stdout and "SCRAM-SHA-512" in up.stdout
        env_file = folder / "clients" / "runtrail-admin.env"
        env = dict(
            line.removeprefix("export ").split("=", 1) for line in env_file.read_text().splitlines()
        )
        env = {k: v.strip("'") for k, v in env.items()}
        ensured = runtrail(env, "topics", "ensure", *flags)
        assert ensured.returncode == 0, ensured.stderr
        # the home keeps its mode: no silent downgrade to an open broker
        downgrade = runtrail({}, "kafka", "up", "--security", "none", *flags, *ports)
        assert downgrade.returncode == 1 and "set up for --security scram" in downgrade.stderr
    finally:
        runtrail({}, "kafka", "down", *flags)
