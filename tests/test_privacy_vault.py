"""Protected content: sealed per (tenant, subject) data key, stored by digest in the content
store of a URL (files, moto's S3, PostgreSQL), opened again only with the key; erasure
destroys the key and the objects, rotation re-wraps keys without touching content."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtrail.persistence import DATA_KEYS, PROTECTED_CONTENT, open_store
from runtrail.privacy.keys_file import FileKeyStore
from runtrail.privacy.reference import ERASED, ContentRef, as_reference
from runtrail.privacy.vault import ContentVault
from tests.s3_fixture import S3Endpoint

SENTINEL = "SENTINEL-7f3a9c-personal-data"


@pytest.fixture(params=["file", "s3", "postgresql"])
def content_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return (tmp_path / "content").as_uri()
    if request.param == "s3":
        endpoint: S3Endpoint = request.getfixturevalue("moto_s3")
        return endpoint.url(f"content-{tmp_path.name}", name="lake")
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def vault(content_url: str, tmp_path: Path) -> Iterator[ContentVault]:
    keys = open_store(DATA_KEYS, (tmp_path / "keys").as_uri())
    found = ContentVault(open_store(PROTECTED_CONTENT, content_url), keys)
    yield found
    found.close()


def test_content_round_trips_and_the_store_holds_ciphertext_only(vault: ContentVault) -> None:
    value = {"messages": [{"role": "user", "content": SENTINEL}], "n": 3}
    ref = vault.put("acme", "run-1", value)
    assert as_reference(str(ref)) == ref
    assert vault.resolve("acme", ref) == value
    [stored] = list(vault.content.objects())
    assert stored.key.startswith(f"acme/{ref.key_id}/")
    blob = vault.content.get(stored.key)
    assert blob is not None and SENTINEL.encode() not in blob


def test_another_tenant_cannot_open_a_reference(vault: ContentVault) -> None:
    ref = vault.put("acme", "run-1", SENTINEL)
    assert vault.resolve("other", ref) == ERASED


def test_erasing_a_subject_shreds_its_key_and_objects_only(vault: ContentVault) -> None:
    gone = vault.put("acme", "run-1", SENTINEL)
    kept = vault.put("acme", "run-2", "kept")
    erased = vault.erase("acme", "run-1")
    assert erased.key_id == gone.key_id and erased.objects == 1
    assert vault.resolve("acme", gone) == ERASED
    assert vault.resolve("acme", kept) == "kept"
    assert [o.key for o in vault.content.objects()] == [f"acme/{kept.key_id}/{kept.digest}"]
    assert vault.erase("acme", "run-1").key_id is None  # nothing left to erase


def test_a_tampered_object_reads_as_erased(tmp_path: Path) -> None:
    vault = ContentVault(
        open_store(PROTECTED_CONTENT, (tmp_path / "c").as_uri()),
        FileKeyStore(tmp_path / "k"),
    )
    ref = vault.put("acme", "run-1", "x")
    path = tmp_path / "c" / "acme" / ref.key_id / "objects.seg"
    path.write_bytes(path.read_bytes()[:-1] + bytes([path.read_bytes()[-1] ^ 1]))
    assert vault.resolve("acme", ref) == ERASED
    forged = ContentRef(ref.store, ref.key_id, "0" * 64, 1)
    assert vault.resolve("acme", forged) == ERASED


def test_rotation_rewraps_data_keys_without_touching_content(tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path / "k")
    vault = ContentVault(open_store(PROTECTED_CONTENT, (tmp_path / "c").as_uri()), keys)
    refs = [vault.put("acme", f"run-{n}", n) for n in range(3)]
    before = {p: p.read_bytes() for p in (tmp_path / "c").rglob("*") if p.is_file()}
    assert len(before) == 3  # one segment per data key
    assert keys.rotate("acme") == 3
    old = tmp_path / "k" / "tenants" / "acme" / "1.key"
    keys.keyring.retire("acme", "1")  # type: ignore[attr-defined]
    assert not old.exists()
    fresh = ContentVault(vault.content, FileKeyStore(tmp_path / "k"))  # no cached keys
    assert [fresh.resolve("acme", ref) for ref in refs] == [0, 1, 2]
    after = {p: p.read_bytes() for p in (tmp_path / "c").rglob("*") if p.is_file()}
    assert after == before


def test_key_files_are_private(tmp_path: Path) -> None:
    keys = FileKeyStore(tmp_path / "k")
    keys.data_key("acme", "someone@example.com")
    files = [p for p in (tmp_path / "k").rglob("*") if p.is_file()]
    assert len(files) == 3  # the tenant key, the wrapped data key, the subject's index
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert b"someone@example.com" not in path.read_bytes()
        assert "someone" not in path.name


def test_a_live_replay_of_erased_input_calls_nothing(tmp_path: Path) -> None:
    from runtrail.capture.record import NodeIoRecord
    from runtrail.capture.replay import ReplayError, replay_model_live, replay_tool_live
    from runtrail.privacy.resolve import Resolver, resolved_record

    vault = ContentVault(
        open_store(PROTECTED_CONTENT, (tmp_path / "c").as_uri()), FileKeyStore(tmp_path / "k")
    )
    prompt = vault.put("acme", "run-1", {"messages": [SENTINEL]})
    arguments = vault.put("acme", "run-1", {"q": SENTINEL})
    base = {"tenantId": "acme", "runId": "run-1", "startedAtEpochMs": 1, "capturedAtEpochMs": 2}
    base["durationMs"] = 1
    model = NodeIoRecord.model_validate(
        {**base, "recordId": "m", "nodeId": "model@x", "nodeType": "MODEL", "inputs": str(prompt)}
    )
    tool = NodeIoRecord.model_validate(
        {
            **base,
            "recordId": "t",
            "nodeId": "tool@x",
            "nodeType": "TOOL",
            "inputs": {"callId": "c", "toolName": "lookup", "arguments": str(arguments)},
        }
    )
    resolver = Resolver(vault)
    assert resolved_record(resolver, model).inputs == {"messages": [SENTINEL]}
    calls: list[object] = []

    class Client:
        def create(self, prompt: object) -> object:
            calls.append(prompt)
            return prompt

    with pytest.raises(ReplayError, match="not resolved"):
        replay_model_live(model, Client())  # the reference itself is never sent
    vault.erase("acme", "run-1")
    for record in (model, tool):
        opened = resolved_record(resolver, record)
        assert ERASED in str(opened.inputs)
        with pytest.raises(ReplayError, match="erased"):
            if record.node_type == "MODEL":
                replay_model_live(opened, Client())
            else:
                replay_tool_live(opened, calls.append)
    assert calls == []
