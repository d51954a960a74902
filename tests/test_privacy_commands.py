"""Content sent through the command API is protected like published content, end to end.

A tenant whose policy puts every class by reference (subject: the run) drives a run through
the command API and the outbox relay, both ``runtrail run`` processes, on the real broker with
the audit service and a real ``file://`` content store. The prompt of ``require_input`` and the
answer of ``provide_input`` carry a sentinel string. Before the erasure, the sentinel is in no
file of the state folder (the command store and its WAL, the audit store, the content and key
stores) and on no topic (events, dead letters, audit), while the API, ``runtrail command``'s
output included, opens it for the tenant; the run's chain verifies. ``runtrail erase --run``
then finds the run's data key and objects: afterwards the sentinel opens nowhere (the API reads
``[erased]``, a fresh resolver too), the run's chain still verifies (erasure event included),
and a second erasure says there is nothing to erase for that run. A control string sent inline
(``goalRef``, in no class) is found by the same scans, so the scans can fail.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from runtrail.commands.client import CommandClient
from runtrail.config import Settings
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.privacy.reference import ERASED, PREFIX
from runtrail.privacy.resolve import resolver_from_settings
from runtrail_tools.kafka.ports import free_ports
from tests.publisher_support import read_all
from tests.support import (
    ServiceProcess,
    create_topic,
    runtrail_cli,
    unique_topic,
    wait_for,
)

SENTINEL = "SENTINEL-cmd-iban-7c41"
CONTROL = "CONTROL-cmd-inline-2e9a"
TENANT, RUN, TOKEN = "acme", "run-cmd-1", "s3cret"
PARTITIONS = 2


def scan(root: Path, needle: bytes) -> list[str]:
    """Every file under ``root`` holding ``needle``."""
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def stored_events(url: str, resolve: str = "false") -> tuple[int, dict[str, Any]]:
    """The API's answer for the run's events with ``?resolve=``: status and body."""
    request = urllib.request.Request(
        f"{url}/v1/runs/{RUN}/events?resolve={resolve}",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(json.loads(response.read()))
    except urllib.error.HTTPError as exc:
        return exc.code, dict(json.loads(exc.read()))


def holding(bootstrap: str, topic: str, expect: int, needle: bytes) -> int:
    """How many records of ``topic`` (waiting for ``expect`` of them) hold ``needle``."""
    records = read_all(bootstrap, topic, expect, timeout=30)
    assert len(records) >= expect, (topic, len(records))
    return sum(needle in (m.value() or b"") for m in records)


@pytest.mark.kafka
def test_content_sent_through_the_command_api_goes_by_reference_and_is_erased(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events = create_topic(kafka_bootstrap, unique_topic("pcmd-ev"), partitions=PARTITIONS)
    create_topic(kafka_bootstrap, f"{events}.dlq", partitions=PARTITIONS)
    audit_topic = create_topic(kafka_bootstrap, unique_topic("pcmd-au"), partitions=PARTITIONS)
    compacted = {"cleanup.policy": "compact"}
    cache_topic = create_topic(kafka_bootstrap, unique_topic("pcmd-rc"), 1, **compacted)
    sessions_topic = create_topic(kafka_bootstrap, unique_topic("pcmd-se"), 1, **compacted)
    state = tmp_path / "state"
    port = free_ports(1)[0]
    policy = {"byReference": "all", "subject": "run"}
    env = {
        "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": events,
        "RUNTRAIL_AUDIT_TOPIC": audit_topic,
        "RUNTRAIL_RESUME_CACHE_TOPIC": cache_topic,
        "RUNTRAIL_SESSIONS_TOPIC": sessions_topic,
        "RUNTRAIL_STATE_DIR": str(state),
        "RUNTRAIL_TENANT": TENANT,
        "RUNTRAIL_CONTENT_STORE_URL": (state / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (state / "keys").as_uri(),
        "RUNTRAIL_PRIVACY_POLICY": json.dumps(policy),
        "RUNTRAIL_COMMAND_URL": f"http://127.0.0.1:{port}",
        "RUNTRAIL_COMMAND_TOKEN": TOKEN,
    }
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        state_dir=state,
        tenant=TENANT,
        content_store_url=env["RUNTRAIL_CONTENT_STORE_URL"],
        key_store_url=env["RUNTRAIL_KEY_STORE_URL"],
        privacy_policy=policy,
    )
    store = f"sqlite:///{state / 'commands.db'}"
    audit_db = f"sqlite:///{state / 'audit.db'}"
    api = ServiceProcess(
        "command-api",
        kafka_bootstrap,
        events,
        group="unused",
        options={"store": store, "http_port": str(port), "tokens": json.dumps({TENANT: TOKEN})},
        env=env,
        log_path=tmp_path / "api.log",
    )
    relay = ServiceProcess(
        "outbox-relay",
        kafka_bootstrap,
        events,
        group="unused",
        options={"store": store, "idle_poll_s": "0.05", "transactional_id": f"relay-{events}"},
        env=env,
        log_path=tmp_path / "relay.log",
    )
    audit = ServiceProcess(
        "audit",
        kafka_bootstrap,
        events,
        group=f"a-{events}",
        options={"store_url": audit_db},
        env=env,
        log_path=tmp_path / "audit.log",
    )
    client = CommandClient(env["RUNTRAIL_COMMAND_URL"], TOKEN)

    def command(*args: str) -> dict[str, Any]:
        sent = runtrail_cli(env, "command", "send", RUN, *args)
        assert sent.returncode == 0, sent.stdout + sent.stderr
        return dict(json.loads(sent.stdout))

    def audited(count: int) -> bool:
        """The relay put the run's events on the topic and the audit service sealed ``count``
        of them (the store is opened each time: the service writes it meanwhile)."""
        links = open_store(AUDIT_LINKS, audit_db)
        try:
            return links.link_at(TENANT, RUN, count - 1) is not None
        finally:
            links.close()

    def verify(length: int) -> None:
        verified = runtrail_cli(
            env, "audit", "verify", "--run", RUN, "--tenant", TENANT, "--store", audit_db
        )
        assert verified.returncode == 0, verified.stdout + verified.stderr
        verdict = json.loads(verified.stdout.strip().splitlines()[-1])
        assert (verdict["valid"], verdict["length"]) == (True, length), verdict

    try:
        log = tmp_path / "api.log"
        wait_for(lambda: log.exists() and "/v1/runs" in log.read_text(), 60, what="the API")
        goal = {"goalRef": f"goal://{CONTROL}", "policyVersion": "p-7"}
        command("accept_run", "--expected-version", "0", "--data", json.dumps(goal))
        ask = {"requestId": "q-1", "prompt": f"{SENTINEL} what is your IBAN?"}
        asked = command("require_input", "--key", "ask-1", "--data", json.dumps(ask))
        # the reading paths open the content for the tenant: runtrail command's output, the API
        assert asked["events"][0]["data"]["prompt"] == ask["prompt"]
        answer = {"requestId": "q-1", "input": {"iban": SENTINEL}}
        command("provide_input", "--data", json.dumps(answer))
        command("complete_run")
        shown = client.events(RUN)
        assert [e["data"].get("prompt") for e in shown][1] == ask["prompt"]
        assert shown[2]["data"]["input"] == answer["input"]
        status, stored = stored_events(env["RUNTRAIL_COMMAND_URL"])  # as written
        assert status == 200
        assert stored_events(env["RUNTRAIL_COMMAND_URL"], "yes")[0] == 400  # never guessed
        refs = [stored["events"][1]["data"]["prompt"], stored["events"][2]["data"]["input"]]
        assert all(r.startswith(PREFIX) for r in refs), refs
        wait_for(lambda: audited(4), 120, 0.2, what="the relay and the audit service")
        verify(4)

        # nowhere in plaintext: command store, content and key stores, audit store, topics
        assert scan(state, SENTINEL.encode()) == []
        inline = [Path(p).name for p in scan(state, CONTROL.encode())]
        assert [p for p in inline if p.startswith("audit.db")], inline
        assert [p for p in inline if p.startswith("commands.db")], inline
        assert holding(kafka_bootstrap, events, 4, CONTROL.encode()) == 1
        for topic, expect in ((events, 4), (f"{events}.dlq", 0), (audit_topic, 1)):
            assert holding(kafka_bootstrap, topic, expect, SENTINEL.encode()) == 0, topic

        erased = runtrail_cli(env, "erase", "--tenant", TENANT, "--run", RUN, "--reason", "art. 17")
        assert erased.returncode == 0, erased.stdout + erased.stderr
        report = json.loads(erased.stdout.strip().splitlines()[-1])
        assert report["objectsDeleted"] == 2 and report["keyId"], report
        wait_for(lambda: audited(5), 120, 0.2, what="the audit service to seal the erasure")
        verify(5)  # the chain still verifies, the erasure event included

        # nothing of it opens any more: the API, runtrail command's output, a fresh resolver
        after = client.events(RUN)
        assert (after[1]["data"]["prompt"], after[2]["data"]["input"]) == (ERASED, ERASED)
        again = command("require_input", "--key", "ask-1", "--data", json.dumps(ask))
        assert again["duplicate"] and again["events"][0]["data"]["prompt"] == ERASED
        resolver = resolver_from_settings(settings)
        try:
            assert [resolver.value(TENANT, r) for r in refs] == [ERASED, ERASED]
        finally:
            resolver.close()
        nothing = runtrail_cli(env, "erase", "--tenant", TENANT, "--run", RUN, "--reason", "x")
        assert nothing.returncode == 1
        assert f"nothing to erase for run {RUN} of {TENANT}" in nothing.stderr
        assert api.terminate() == 0 and relay.terminate() == 0
    finally:
        for process in (api, relay, audit):
            process.terminate()
            process.close()

    assert scan(state, SENTINEL.encode()) == []
    assert scan(tmp_path, SENTINEL.encode()) == []  # the services' logs too
    for topic, expect in ((events, 5), (f"{events}.dlq", 0), (audit_topic, 1)):
        assert holding(kafka_bootstrap, topic, expect, SENTINEL.encode()) == 0, topic
