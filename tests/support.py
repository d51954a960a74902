"""Test helpers: event forms, producing and consuming raw messages, running services."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from runtrail.config import Settings
from runtrail.events import CURRENT_VERSIONS, EventCodec, validate_json_form

FIXTURES = Path(__file__).resolve().parents[1] / "schemas" / "runtrail_schemas" / "fixtures"
_codec = EventCodec()


def fixture_forms() -> dict[tuple[str, int], dict[str, Any]]:
    """The committed JSON-form fixture of every retained (type, version)."""
    forms = {}
    for path in sorted(FIXTURES.glob("*.json")):
        form = json.loads(path.read_text())
        forms[(form["type"], form["schemaVersion"])] = form
    return forms


def form(
    event_type: str = "MODEL_RESPONSE",
    run_id: str = "run-1",
    sequence: int = 1,
    data: dict[str, Any] | None = None,
    *,
    version: int | None = None,
    tenant: str = "t1",
    **envelope: Any,
) -> dict[str, Any]:
    """A JSON-form event with sensible defaults."""
    base: dict[str, Any] = {
        "eventId": str(uuid.uuid4()),
        "runId": run_id,
        "tenantId": tenant,
        "sequence": str(sequence),
        "type": event_type,
        "schemaVersion": CURRENT_VERSIONS.get(event_type, 1) if version is None else version,
        "occurredAt": "2026-11-29T10:00:00.000Z",
        "recordedAt": None,
        "actor": {"kind": "agent", "id": "test-agent"},
        "causationEventId": None,
        "correlationId": run_id,
        "sessionId": None,
        "turnId": "turn-1",
        "step": 1,
        "data": data if data is not None else {"message": "hi", "raw": None},
    }
    base.update(envelope)
    return base


def encode(f: dict[str, Any]) -> bytes:
    return _codec.encode(validate_json_form(f))


def produce(bootstrap: str, topic: str, items: Iterable[tuple[bytes | str | None, bytes]]) -> int:
    """Produce (key, value) pairs with the Java-compatible partitioner; wait for delivery."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
            "linger.ms": 10,
        }
    )
    count = 0
    for key, value in items:
        while True:
            try:
                producer.produce(topic, value=value, key=key)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
        if count % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "messages left undelivered"
    return count


def produce_forms(bootstrap: str, topic: str, forms: Iterable[dict[str, Any]]) -> int:
    return produce(bootstrap, topic, ((f["runId"], encode(f)) for f in forms))


def consume_all(bootstrap: str, topic: str, *, expect: int, timeout: float = 60.0) -> list[Any]:
    """Read a topic from the beginning until ``expect`` messages arrived (or time runs out)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-reader-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expect and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is None:
                    out.append(msg)
    finally:
        consumer.close()
    return out


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The high watermark of each partition; a leader still being elected or learnt (a topic
    just made, a broker just back) is asked again until the last one's 10 s are up."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-watermarks"})
    try:
        return {p: _high_watermark(consumer, TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        consumer.close()


#: answers of a partition whose leader is being elected or not known yet to the broker asked
_NO_LEADER_YET = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)


def _high_watermark(consumer: Consumer, tp: TopicPartition, timeout: float = 10) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return int(consumer.get_watermark_offsets(tp, timeout=timeout)[1])
        except KafkaException as exc:
            if exc.args[0].code() not in _NO_LEADER_YET or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


class ServiceProcess:
    """``runtrail run SERVICE`` in a child process, with its own group and options."""

    def __init__(
        self,
        service: str,
        bootstrap: str,
        topic: str,
        *,
        group: str,
        options: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        main_module: str = "runtrail_tools.cli.main",
    ) -> None:
        """``main_module``: what ``python -m`` runs with the ``run`` arguments (a test's
        wrapper of ``runtrail_tools.cli.main``, e.g. ``tests.broken_handler``)."""
        cmd = [
            sys.executable,
            "-m",
            main_module,
            "run",
            service,
            "--group",
            group,
            "--bootstrap-servers",
            bootstrap,
            "--events-topic",
            topic,
            "--metrics-port",
            "0",
            "-v",
        ]
        for key, value in (options or {}).items():
            cmd += ["-o", f"{key}={value}"]
        full_env = {
            **os.environ,
            "RUNTRAIL_DLQ_TOPIC": f"{topic}.dlq",
            "RUNTRAIL_COMMIT_INTERVAL_MS": "200",
            **(env or {}),
        }
        self.service = service
        self.log_path = log_path
        self._log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, env=full_env, stdout=self._log, stderr=self._log)

    def metrics_port(self, timeout: float = 30.0) -> int:
        """The port the child bound (it logs it at start)."""
        assert self.log_path is not None, "needs log_path"
        pattern = re.compile(rf"pid {self.proc.pid}\b.*metrics on [0-9.]+:(\d+)")
        found: list[int] = []

        def seen() -> bool:
            match = pattern.search(self.log_path.read_text()) if self.log_path else None
            if match:
                found.append(int(match.group(1)))
            return bool(match)

        wait_for(seen, timeout, what="the metrics port in the log")
        return found[0]

    def get(self, path: str) -> tuple[int, str]:
        """The status and body of ``path`` on this process's metrics endpoint (``/readyz``
        answers 503 with what it waits for)."""
        import urllib.error
        import urllib.request

        url = f"http://127.0.0.1:{self.metrics_port()}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()

    def processed(self) -> float:
        """``runtrail_processed_total`` of this process, from its /metrics."""
        text = self.get("/metrics")[1]
        match = re.search(r'^runtrail_processed_total\{service="[^"]+"\} (\S+)$', text, re.M)
        return float(match.group(1)) if match else 0.0

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM once the child listens for it (not while the interpreter itself starts,
        where any Python program dies of it), then its exit status."""
        wait_for(
            lambda: not self.alive() or catches_sigterm(self.proc.pid), 30, 0.01, what="handler"
        )
        self.proc.send_signal(signal.SIGTERM)
        status = self.proc.wait(timeout)
        if status != 0 and self.log_path is not None:
            # pytest shows a failing test's output: the reason is in the child's last lines
            tail = self.log_path.read_text(errors="replace").splitlines()[-40:]
            print(f"{self.log_path} (exit status {status}):", *tail, sep="\n", file=sys.stderr)
        return status

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            self.kill()
        if hasattr(self._log, "close"):
            self._log.close()


def catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (its ``SigCgt`` mask in /proc)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        return False
    return False


def wait_for(
    predicate: Any, timeout: float, interval: float = 0.2, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def read_lines(path: Path) -> list[str]:
    """Complete lines of a service's output file (a torn last line is not counted)."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")
    return [line for line in lines[:-1] if line]


def create_topic(bootstrap: str, name: str, partitions: int = 3, **config: str) -> str:
    """Create a topic (LogAppendTime like the events topic) and wait until it is usable."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    settings = {"message.timestamp.type": "LogAppendTime", **config}
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=settings)])
    for future in futures.values():
        future.result(30)
    wait_for(
        lambda: len(admin.list_topics(name, timeout=5).topics[name].partitions) == partitions,
        30,
        what=f"topic {name}",
    )
    return name


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def stack_settings(bootstrap: str, state_dir: Path, prefix: str, **more: Any) -> Settings:
    """Settings of a test's stack on the shared broker: every topic its own, named after
    ``prefix`` (which the stack's consumer groups take too), so stacks never see each other."""
    return Settings(
        bootstrap_servers=bootstrap,
        state_dir=state_dir,
        events_topic=f"{prefix}.events",
        dlq_topic=f"{prefix}.events.dlq",
        resume_cache_topic=f"{prefix}.resume-cache",
        sessions_topic=f"{prefix}.sessions",
        audit_topic=f"{prefix}.audit",
        **more,
    )


def runtrail_cli(
    env: dict[str, str], *args: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``runtrail ARGS`` in a process of its own, with ``env`` over this one's environment."""
    return subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **env},
    )
