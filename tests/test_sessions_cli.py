"""``runtrail sessions list|show|delete|rebuild`` against a file store (and a real broker for
``show --restore`` and ``rebuild``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtrail.events import validate_json_form
from runtrail.sessions import AgentSession, parse_snapshot
from runtrail.sessions.store_file import FileSessionStore
from runtrail_tools.cli.main import main
from tests.sessions_support import built_snapshot, session_forms
from tests.support import create_topic, produce_forms, unique_topic


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_list_show_delete_and_a_corrupted_file_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = FileSessionStore(tmp_path / "sessions")
    store.save(built_snapshot(9, tenant="acme", session="s1"))
    store.save(built_snapshot(4, tenant="globex", session="s9"))
    url = store.describe()

    status, out, _ = run(capsys, "sessions", "list", "--store", url, "--tenant", "acme")
    assert status == 0
    assert [json.loads(line)["sessionId"] for line in out.splitlines()] == ["s1"]
    status, out, _ = run(capsys, "sessions", "list", "--store", url, "--all-tenants")
    assert [json.loads(line)["tenantId"] for line in out.splitlines()] == ["acme", "globex"]

    status, out, _ = run(capsys, "sessions", "show", "s1", "--store", url, "--tenant", "acme")
    assert status == 0 and parse_snapshot(out.strip(), "stdout").revision == 9
    status, _, err = run(capsys, "sessions", "show", "s1", "--store", url, "--tenant", "globex")
    assert status == 1 and "no session globex/s1" in err

    path = store.path_of("acme", "s1")
    path.write_bytes(path.read_bytes().replace(b'"a1"', b'"b1"'))
    status, out, err = run(capsys, "sessions", "show", "s1", "--store", url, "--tenant", "acme")
    assert status == 1 and out == "" and str(path) in err and "digest mismatch" in err

    assert run(capsys, "sessions", "delete", "s1", "--store", url, "--tenant", "acme")[0] == 0
    assert run(capsys, "sessions", "delete", "s1", "--store", url, "--tenant", "acme")[0] == 1


@pytest.mark.kafka
def test_show_restore_and_rebuild_read_the_events_topic(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = create_topic(kafka_bootstrap, unique_topic("sess-cli"), partitions=1)
    forms = session_forms(30)
    produce_forms(kafka_bootstrap, topic, forms)
    partial, whole = AgentSession("t1", "s1"), AgentSession("t1", "s1")
    for offset, form in enumerate(forms):  # one partition: offsets are the positions
        event = validate_json_form(form)
        whole.apply(event, source=(topic, 0, offset))
        if offset < 18:
            partial.apply(event, source=(topic, 0, offset))
    store = FileSessionStore(tmp_path / "sessions")
    store.save(partial.snapshot())
    common = ["--store", store.describe(), "--tenant", "t1"]
    common += ["--bootstrap-servers", kafka_bootstrap, "--events-topic", topic]

    status, out, err = run(capsys, "sessions", "show", "s1", "--restore", *common)
    assert status == 0, err
    assert "18 event(s) from the snapshot, 12 replayed" in err
    assert parse_snapshot(out.strip(), "stdout").digest == whole.snapshot().digest
    assert store.load("t1", "s1").revision == 18  # type: ignore[union-attr]  (nothing saved)

    path = store.path_of("t1", "s1")
    path.write_bytes(b"{broken")
    status, _, err = run(capsys, "sessions", "rebuild", "s1", *common)
    assert status == 0, err
    assert store.load("t1", "s1").digest == whole.snapshot().digest  # type: ignore[union-attr]
