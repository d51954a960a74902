"""The publisher stores protected content by reference, against a real broker: the topic and
the spool hold references (never the content), readers resolve them, and a 50 MB tool result
goes by reference whatever the policy (claim-check) and flows through the topic."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from runtrail.config import Settings
from runtrail.privacy.field_classes import CONTENT_FIELDS
from runtrail.privacy.policy import PrivacyPolicy
from runtrail.privacy.protect import ContentProtector, vault_from_settings
from runtrail.privacy.reference import as_reference
from runtrail.privacy.resolve import Resolver
from runtrail.publisher import Publisher
from tests.publisher_support import contents, read_all
from tests.s3_fixture import S3Endpoint

SENTINEL = "SENTINEL-c41d-erasable"

#: one event of every type with content, each content field holding the sentinel
EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("MODEL_REQUEST", {"prompt": {"messages": [{"role": "user", "content": SENTINEL}]}}),
    ("MODEL_REASONING", {"text": f"thinking about {SENTINEL}"}),
    ("MODEL_RESPONSE", {"message": SENTINEL, "raw": {"choices": [{"text": SENTINEL}]}}),
    ("TOOL_CALL", {"callId": "c1", "toolName": "lookup", "arguments": {"q": SENTINEL}}),
    ("TOOL_RESULT", {"callId": "c1", "toolName": "lookup", "output": [SENTINEL], "error": None}),
    ("session.snapshot", {"lastAppliedSequence": 5, "memory": {"notes": [SENTINEL]}}),
]


def settings(tmp_path: Path, bootstrap: str, topic: str, **privacy: Any) -> Settings:
    return Settings(
        bootstrap_servers=bootstrap,
        spool_dir=tmp_path / "spool",
        state_dir=tmp_path / "state",
        tenant="t1",
        events_topic=topic,
        **privacy,
    )


def test_every_content_field_is_in_a_class() -> None:
    assert {e for e, _ in EVENTS} <= set(CONTENT_FIELDS)


@pytest.mark.kafka
def test_every_class_by_reference_leaves_no_content_on_the_topic(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic_factory: Any, moto_s3: S3Endpoint
) -> None:
    topic = kafka_topic_factory(1)
    given = settings(
        tmp_path,
        kafka_bootstrap,
        topic,
        content_store_url=moto_s3.url(f"content-{topic}"),
        privacy_policy={"byReference": "all"},
    )
    with Publisher(given) as pub:
        ids = [pub.publish(kind, "run-1", data, session_id="s1") for kind, data in EVENTS]
        assert all(ids), pub.stats()
        assert pub.flush(60) == 0
    raw = read_all(kafka_bootstrap, topic, len(EVENTS))
    assert len(raw) == len(EVENTS)
    assert not [m for m in raw if SENTINEL.encode() in m.value()]
    found = contents(kafka_bootstrap, topic, len(EVENTS))
    vault = vault_from_settings(given)
    resolver = Resolver(vault)
    for event, (_, data) in zip(found.events, EVENTS, strict=True):
        form = event.json_form()
        for name in CONTENT_FIELDS[event.type]:
            if data.get(name) is not None:
                assert as_reference(form["data"][name]) is not None, (event.type, name)
        resolved = resolver.value("t1", form["data"])
        assert {k: resolved[k] for k in data} == data
    assert not [
        o for o in vault.content.objects() if SENTINEL.encode() in (vault.content.get(o.key) or b"")
    ]
    resolver.close()


def test_the_spool_holds_the_event_as_published(tmp_path: Path) -> None:
    given = settings(
        tmp_path,
        "127.0.0.1:9",  # nothing listens: every event stays in the spool
        "unreachable",
        content_store_url=(tmp_path / "content").as_uri(),
        privacy_policy={"byReference": ["prompts", "tool_results"]},
    )
    pub = Publisher(given, producer_overrides={"socket.connection.setup.timeout.ms": "1000"})
    try:
        assert pub.publish("MODEL_REQUEST", "r", {"prompt": SENTINEL})
        assert pub.publish("TOOL_RESULT", "r", {"callId": "c", "output": SENTINEL})
        assert pub.publish("TOOL_CALL", "r", {"callId": "c", "arguments": "kept inline"})
        pub.sync()
        spooled = b"".join(p.read_bytes() for p in (tmp_path / "spool").rglob("*") if p.is_file())
    finally:
        pub.close(timeout=1)
    assert SENTINEL.encode() not in spooled
    assert spooled.count(b"rtref:1:main:") == 2
    assert b"kept inline" in spooled


def fsynced_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths ``os.fsync`` or ``os.fdatasync`` is called on, in order (the real calls
    still run)."""
    seen: list[str] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def spy(fd: int, real: Any = real) -> None:
            seen.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)

        monkeypatch.setattr(os, name, spy)
    return seen


@pytest.mark.parametrize("fsync", [None, "false"])
def test_content_is_fsynced_in_the_spools_group_commit_before_the_spool(
    fsync: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Default: the segment and the data key an event refers to are fsynced before the spool
    record of that event, in the same group commit; ``?fsync=false``: never."""
    content = (tmp_path / "content").as_uri() + (f"?fsync={fsync}" if fsync else "")
    keys = (tmp_path / "keys").as_uri() + (f"?fsync={fsync}" if fsync else "")
    given = settings(
        tmp_path,
        "127.0.0.1:9",
        "unreachable",
        content_store_url=content,
        key_store_url=keys,
        privacy_policy={"byReference": "all"},
    )
    seen = fsynced_paths(monkeypatch)
    pub = Publisher(given, producer_overrides={"socket.connection.setup.timeout.ms": "1000"})
    try:
        assert pub.publish("TOOL_RESULT", "r", {"callId": "c", "output": SENTINEL})
        pub.sync()
    finally:
        pub.close(timeout=1)
    segment = [i for i, p in enumerate(seen) if p.endswith("objects.seg")]
    data_key = [i for i, p in enumerate(seen) if "/keys/data/" in p and p.endswith(".json")]
    spool = [i for i, p in enumerate(seen) if p.startswith(str(tmp_path / "spool"))]
    assert spool, seen
    if fsync == "false":
        assert segment == [] and data_key == []
    else:
        assert segment and data_key, seen
        assert max(segment[0], data_key[0]) < spool[0], seen


def test_a_content_store_that_fails_refuses_the_event(tmp_path: Path) -> None:
    given = settings(
        tmp_path,
        "127.0.0.1:9",
        "unreachable",
        content_store_url=(tmp_path / "content").as_uri(),
        privacy_policy={"byReference": "all"},
    )
    pub = Publisher(given)
    try:
        (tmp_path / "content").rmdir()
        (tmp_path / "content").write_text("a file: the store cannot write under it")
        refused = pub.submit({"runId": "r", "type": "MODEL_REASONING", "data": {"text": "x"}})
    finally:
        pub.close(timeout=1)
    assert (refused.accepted, refused.reason) == (False, "protect-failed")


def test_text_that_reads_as_a_reference_goes_by_one(tmp_path: Path) -> None:
    given = settings(tmp_path, "x", "x", content_store_url=(tmp_path / "c").as_uri())
    vault = vault_from_settings(given)
    assert vault is not None
    protect = ContentProtector(vault, PrivacyPolicy())
    forged = f"rtref:1:main:dk-{'0' * 32}:1:{'0' * 64}"
    form = {"type": "MODEL_REASONING", "runId": "r", "tenantId": "t", "data": {"text": forged}}
    assert protect(form) is form  # a well-formed reference is kept: it may be a re-publish
    lookalike = {**form, "data": {"text": "rtref:1:but not one"}}
    stored = protect(lookalike)["data"]["text"]
    assert Resolver(vault).one("t", stored) == "rtref:1:but not one"


def test_the_subject_names_whose_key_seals_the_content() -> None:
    policy = PrivacyPolicy.from_json(
        {"tenants": {"a": {"subject": "actor"}, "s": {"subject": "session"}}}
    )
    event = {"runId": "r", "sessionId": "s1", "actor": {"kind": "user", "id": "u@x"}}
    assert policy.subject_of({**event, "tenantId": "a"}) == "u@x"
    assert policy.subject_of({**event, "tenantId": "s"}) == "s1"
    assert policy.subject_of({**event, "tenantId": "other"}) == "r"
    with pytest.raises(ValueError, match="known classes"):
        PrivacyPolicy.from_json({"byReference": ["prompt"]})


@pytest.mark.kafka
def test_a_50_mb_tool_result_is_claim_checked_end_to_end(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic_factory: Any
) -> None:
    topic = kafka_topic_factory(1)
    given = settings(
        tmp_path, kafka_bootstrap, topic, content_store_url=(tmp_path / "content").as_uri()
    )
    big = {"rows": os.urandom(25 << 20).hex()}  # 50 MiB of text, no policy class by reference
    with Publisher(given) as pub:
        small = pub.publish("TOOL_RESULT", "r", {"callId": "c", "output": {"n": 1}})
        large = pub.submit(
            {"runId": "r", "type": "TOOL_RESULT", "data": {"callId": "d", "output": big}}
        )
        assert small and large.accepted, large
        assert pub.flush(120) == 0
    found = contents(kafka_bootstrap, topic, 2)
    first, second = (e.json_form()["data"]["output"] for e in found.events)
    assert first == {"n": 1}  # under the claim-check size: inline, as before
    ref = as_reference(second)
    assert ref is not None and ref.size == len(orjson.dumps(big))
    assert Resolver(vault_from_settings(given)).value("t1", second) == big
