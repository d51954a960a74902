"""The ai4j adapter follows the Python publisher's privacy policy, in the Python stores' formats.

Configured by the same settings (``RUNTRAIL_CONTENT_STORE_URL``, ``RUNTRAIL_KEY_STORE_URL``,
``RUNTRAIL_PRIVACY_POLICY``), the Java adapter seals protected content into the ``file://``
content store with the data key of (tenant, subject) from the ``file://`` key store, and the
event carries the reference. So:

* Python's ``Resolver`` opens what Java sealed, and the two sides share one data key per
  subject whichever made it first, and an unusual tenant ID names the same folders on both
  sides (``Driver protect``: the protector alone, no broker);
* content over the claim-check size goes by reference with no class in the policy, content
  under it stays inline, and an unsupported store scheme is refused by name;
* a real ai4j agent's run, spooled while the broker is away and then resent, holds references
  in the spool and on the topic, never its per-run sentinel; Python resolves them; after
  ``runtrail erase`` they read as erased, another run's still resolve, and no file of the
  content store, key store or spool, and no record of the topic, holds the sentinel. A
  field kept inline (MODEL_RETRY's reason) is found by the same scans, so they can fail.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.events.codec import EventCodec
from runtrail.privacy.field_classes import CONTENT_FIELDS
from runtrail.privacy.protect import vault_from_settings
from runtrail.privacy.reference import ERASED, ContentRef, as_reference
from runtrail.privacy.resolve import Resolver
from runtrail.publisher.legacy_spool import parse_line
from tests.ai4j_adapter import adapter
from tests.support import consume_all, create_topic, runtrail_cli, unique_topic

SENTINEL = "SENTINEL-ai4j-7c1e"
TENANT = "acme"  # the tenant of the driver's down mode
PER_RUN = 21  # what the adapter publishes of the scripted run (tests/test_adapter_ai4j_down.py)
INLINE = b"429 Too Many Requests"  # MODEL_RETRY's reason: in no content class, inline


def privacy_env(root: Path, policy: dict[str, Any]) -> dict[str, str]:
    return {
        "RUNTRAIL_STATE_DIR": str(root / "state"),
        "RUNTRAIL_CONTENT_STORE_URL": (root / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (root / "keys").as_uri(),
        "RUNTRAIL_PRIVACY_POLICY": json.dumps(policy),
    }


def resolver(env: dict[str, str]) -> Resolver:
    return Resolver(
        vault_from_settings(
            Settings(
                state_dir=Path(env["RUNTRAIL_STATE_DIR"]),
                content_store_url=env["RUNTRAIL_CONTENT_STORE_URL"],
                key_store_url=env["RUNTRAIL_KEY_STORE_URL"],
            )
        )
    )


def form(event_type: str, run: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": event_type, "runId": run, "tenantId": "t1", "data": data}


def test_python_opens_what_java_sealed_with_one_data_key_per_subject(tmp_path: Path) -> None:
    env = privacy_env(tmp_path, {"byReference": "all"})
    opened = resolver(env)
    assert opened.vault is not None
    python_first = opened.vault.keys.data_key("t1", "run-py")  # Python makes this one first
    forms = [
        form("MODEL_REQUEST", "run-py", {"prompt": {"messages": [{"content": SENTINEL}]}}),
        form("MODEL_RESPONSE", "run-java", {"message": f"é {SENTINEL}", "raw": {"x": [1, None]}}),
        form("TOOL_RESULT", "run-java", {"callId": "c", "output": [SENTINEL], "error": None}),
        form("STEP_END", "run-java", {"reason": SENTINEL}),  # no content class: inline
    ]
    sealed = adapter().run("protect", stdin=forms, env=env)
    refs: dict[tuple[str, str], ContentRef] = {}
    for sealed_form in sealed:
        for name, value in sealed_form["data"].items():
            if name in CONTENT_FIELDS.get(sealed_form["type"], {}) and value is not None:
                ref = as_reference(value)
                assert ref is not None, (sealed_form, name)
                refs[(sealed_form["runId"], name)] = ref
    assert sealed[3]["data"]["reason"] == SENTINEL and sealed[2]["data"]["error"] is None
    assert SENTINEL not in json.dumps(sealed[:3])

    # the key Python made is the one Java sealed with; the key Java made is the one Python finds
    assert refs[("run-py", "prompt")].key_id == python_first.key_id
    java_key = opened.vault.keys.data_key("t1", "run-java").key_id
    assert {refs[("run-java", n)].key_id for n in ("message", "raw", "output")} == {java_key}

    assert opened.value("t1", sealed) == forms
    message = json.dumps(f"é {SENTINEL}", ensure_ascii=False).encode()
    assert refs[("run-java", "message")].size == len(message)  # the plaintext's JSON bytes
    keys = tmp_path / "keys"
    key_files = [*keys.rglob("dk-*.json"), *keys.rglob("*.key")]
    assert key_files and all(p.stat().st_mode & 0o777 == 0o600 for p in key_files)
    segments = list((tmp_path / "content").rglob("objects.seg"))
    assert len(segments) == 2 and all(p.stat().st_mode & 0o777 == 0o600 for p in segments)
    opened.close()


def test_a_tenant_id_names_the_same_folders_on_both_sides(tmp_path: Path) -> None:
    env = privacy_env(tmp_path, {"byReference": "all"})
    tenant = ".Acme Corp/ü~+%"  # a leading dot, a space, a slash, non-ASCII, reserved signs
    given = {**form("MODEL_REASONING", "run-1", {"text": SENTINEL}), "tenantId": tenant}
    (sealed,) = adapter().run("protect", stdin=[given], env=env)
    opened = resolver(env)
    assert opened.value(tenant, sealed) == given
    assert opened.value("t1", sealed)["data"]["text"] == ERASED  # another tenant opens nothing
    opened.close()


def test_content_over_the_claim_check_goes_by_reference_with_the_policy_off(
    tmp_path: Path,
) -> None:
    env = privacy_env(tmp_path, {})  # no class by reference: only the claim check applies
    large = "x" * (1024 * 1024) + SENTINEL
    forms = [
        form("TOOL_RESULT", "run-1", {"callId": "c", "output": {"rows": [large]}}),
        form("TOOL_RESULT", "run-1", {"callId": "d", "output": {"rows": [SENTINEL]}}),
        form("MODEL_RESPONSE", "run-1", {"message": "rtref:1:not-a-reference"}),
    ]
    sealed = adapter().run("protect", stdin=forms, env=env)
    big = as_reference(sealed[0]["data"]["output"])
    assert big is not None and big.size > 1024 * 1024
    assert sealed[1] == forms[1]  # small content stays inline
    assert as_reference(sealed[2]["data"]["message"]) is not None  # reads as one: goes by one
    opened = resolver(env)
    assert opened.value("t1", sealed) == forms
    opened.close()


def test_other_store_schemes_are_refused_by_name(tmp_path: Path) -> None:
    env = {**privacy_env(tmp_path, {}), "RUNTRAIL_CONTENT_STORE_URL": "s3://bucket/content"}
    answer = adapter().run("protect", stdin=[], env=env)
    assert "s3://" in answer["error"] and "file://" in answer["error"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def files_holding(root: Path, needle: bytes) -> list[str]:
    """Files under ``root`` holding ``needle``, in their bytes or in a spool line's value."""
    found = []
    for path in (p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        values = [data]
        if path.name.endswith(".spool"):
            values += [parse_line(line).value for line in data.splitlines()]
        if any(needle in value for value in values):
            found.append(str(path))
    return found


@pytest.mark.kafka
def test_an_ai4j_run_goes_by_reference_resolves_and_erases_without_trace(
    tmp_path: Path, kafka_bootstrap: str
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("ai4j-privacy"), partitions=2)
    env = {
        **privacy_env(tmp_path, {"byReference": "all"}),
        "AI4J_DRIVER_SECRET": SENTINEL,
        "RUNTRAIL_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "RUNTRAIL_EVENTS_TOPIC": topic,
    }
    erased_run, kept_run = "down-0", "after-0"
    gone, kept = f"{SENTINEL}-{erased_run}".encode(), f"{SENTINEL}-{kept_run}".encode()
    spool = tmp_path / "spool"
    down = f"127.0.0.1:{closed_port()}"

    # the broker is away: the run waits in the spool, holding references only
    result = adapter().run("down", down, "1000", "1", str(spool), "-", topic, env=env)
    assert result["stats"]["spooled"] == PER_RUN, result
    assert files_holding(spool, INLINE) and not files_holding(spool, gone)
    assert files_holding(spool, b"rtref:1:main:dk-")

    # the broker is back: the spool is resent, then another run is published directly
    result = adapter().run("down", down, "1000", "0", str(spool), kafka_bootstrap, topic, env=env)
    assert result["drained"] and result["after"]["published"] == 2 * PER_RUN, result
    records = consume_all(kafka_bootstrap, topic, expect=2 * PER_RUN)
    values = [m.value() for m in records]
    assert any(INLINE in v for v in values)
    assert not any(gone in v or kept in v for v in values)
    codec = EventCodec()
    events = [codec.decode(v).event.model_dump(mode="json", by_alias=True) for v in values]
    protected = [e for e in events if e["type"] in CONTENT_FIELDS]
    assert {e["type"] for e in protected} >= {"MODEL_REQUEST", "MODEL_RESPONSE", "TOOL_RESULT"}
    for event in protected:
        for name in CONTENT_FIELDS[event["type"]]:
            value = event["data"].get(name)
            assert value is None or as_reference(value) is not None, (event["type"], name)

    opened = resolver(env)
    prompts = {
        e["runId"]: json.dumps(opened.value(TENANT, e["data"]["prompt"]))
        for e in events
        if e["type"] == "MODEL_REQUEST"
    }
    assert gone.decode() in prompts[erased_run] and kept.decode() in prompts[kept_run]

    erased = runtrail_cli(env, "erase", "--tenant", TENANT, "--run", erased_run, "--reason", "x")
    assert erased.returncode == 0, erased.stderr
    assert json.loads(erased.stdout.strip().splitlines()[-1])["objectsDeleted"] > 0

    after = {
        e["runId"]: opened.value(TENANT, e["data"]["prompt"])
        for e in events
        if e["type"] == "MODEL_REQUEST"
    }
    assert after[erased_run] == ERASED and kept.decode() in json.dumps(after[kept_run])
    opened.close()
    values = [m.value() for m in consume_all(kafka_bootstrap, topic, expect=2 * PER_RUN + 1)]
    assert any(b"run.content_erased" in v for v in values)
    assert not any(gone in v for v in values)
    assert files_holding(tmp_path, gone) == []
