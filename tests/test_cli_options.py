"""Options of the ``runtrail`` CLI no other test gives: ``command send --data``, ``erase
--record-run``, ``projection list --limit``, ``otlp drops --limit`` and ``--version``.

Each runs the real command (in-process through the console script's ``main``, or the console
script itself) against the real thing: a command API over HTTP on an SQLite command store, a
broker and a content store for the erasure, SQLite projection and drops stores; what the option
did is read back from there, not from the command's own report.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

import runtrail
from runtrail.commands.client import CommandClient
from runtrail.config import Settings
from runtrail.drops.tally import DropTally
from runtrail.events import EventCodec
from runtrail.persistence import DATA_KEYS, PROJECTIONS, PROTECTED_CONTENT, open_store
from runtrail.persistence.kinds import OTLP_DROPS
from runtrail.persistence.urls import sqlite_url
from runtrail.privacy.vault import ContentVault
from runtrail.projection import ProjectionBatch, RunProjection, replay
from runtrail.publisher import Publisher
from runtrail_tools.cli.main import main
from tests.commands_support import serving_command_api
from tests.projection_support import full_run
from tests.support import consume_all, create_topic, unique_topic


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``runtrail ARGV`` in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# --- runtrail command send --data ---------------------------------------------------------------
TOKEN = "tok-acme"


@pytest.fixture
def command_api(tmp_path: Path) -> Iterator[str]:
    with serving_command_api(sqlite_url(tmp_path / "commands.db"), {"acme": TOKEN}) as url:
        yield url


def test_command_send_data_is_the_commands_data(
    command_api: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``command send RUN NAME --data JSON`` sends that object as the command's data, and the
    run's history records it. Ignored (the default ``{}`` sent), the operator's answer to the
    run's question is lost: the command is refused, or worse accepted without it. A --data
    that is not a JSON object is refused before anything is sent, naming --data."""
    client = CommandClient(command_api, TOKEN)
    accepted = {"goalRef": "goal-1", "policyVersion": "p1"}
    assert client.send("run-1", "accept_run", accepted, expected_version=0).accepted
    question = {"requestId": "q-1", "prompt": "which region?"}
    assert client.send("run-1", "require_input", question, expected_version=1).accepted
    flags = ("--url", command_api, "--token", TOKEN, "--by", "ops")

    answer = {"requestId": "q-1", "input": {"region": "eu-west-1", "confirm": True}}
    code, out, err = run_cli(
        capsys, "command", "send", "run-1", "provide_input", *flags, "--data", json.dumps(answer)
    )
    assert code == 0, err
    assert json.loads(out)["version"] == 3
    last = client.events("run-1")[-1]
    assert (last["type"], last["data"]["requestId"], last["data"]["input"]) == (
        "run.input_received",
        "q-1",
        answer["input"],
    )
    assert last["actor"] == {"kind": "operator", "id": "ops"}

    # not JSON, or not an object: refused here, nothing sent
    for bad, says in (("{requestId: q-1}", "--data is not JSON"), ("[1, 2]", "JSON object")):
        code, _, err = run_cli(
            capsys, "command", "send", "run-1", "fail_run", *flags, "--data", bad
        )
        assert code == 2 and says in err, err
    assert len(client.events("run-1")) == 3


# --- runtrail erase --record-run ----------------------------------------------------------------
def test_erase_subject_record_run_records_the_erasure_in_that_runs_history(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """``erase --subject S --record-run R`` appends ``run.content_erased`` to run R, after its
    last event, with the subject's scope and digest. Ignored, a data subject's erasure leaves
    no trace in any run's history (the audit chain, the projection, the sessions service never
    learn of it). Given with ``--run`` instead of ``--subject`` it names a second run, which
    is refused rather than silently dropped."""
    topic = create_topic(kafka_bootstrap, unique_topic("erase-record"), partitions=2)
    agent = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=topic,
        tenant="t1",
        state_dir=tmp_path / "agent",
    )
    with Publisher(agent) as publisher:  # as an agent records its runs
        for run, count in (("run-42", 3), ("run-other", 2)):
            for _ in range(count):
                assert publisher.publish("STEP_END", run, {"reason": None})
        assert publisher.flush(60) == 0
    content, keys = (tmp_path / "content").as_uri(), (tmp_path / "keys").as_uri()
    monkeypatch.setenv("RUNTRAIL_CONTENT_STORE_URL", content)
    monkeypatch.setenv("RUNTRAIL_KEY_STORE_URL", keys)
    monkeypatch.delenv("RUNTRAIL_AUDIT_KEY_PATH", raising=False)
    vault = ContentVault(open_store(PROTECTED_CONTENT, content), open_store(DATA_KEYS, keys))
    vault.put("t1", "user-7", "the subject's words")
    vault.put("t1", "user-8", "someone else's")
    vault.close()
    where = ["--bootstrap-servers", kafka_bootstrap, "--events-topic", topic]
    where += ["--state-dir", str(tmp_path / "state"), "--no-topics", "--tenant", "t1"]

    code, _, err = run_cli(
        capsys, "erase", "--run", "run-42", "--record-run", "run-other", "--reason", "x", *where
    )
    assert code == 2 and "--record-run" in err, err

    code, out, err = run_cli(
        capsys, "erase", "--subject", "user-7", "--record-run", "run-42", "--reason", "asked",
        "--requested-by", "dpo", *where,
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    assert report["objectsDeleted"] == 1 and report["eventId"]

    codec = EventCodec()
    events = [codec.decode(m.value()).event for m in consume_all(kafka_bootstrap, topic, expect=6)]
    erasures = [e for e in events if e.type == "run.content_erased"]
    assert len(events) == 6 and len(erasures) == 1
    erasure = erasures[0]
    assert (erasure.tenant_id, erasure.run_id, erasure.sequence) == ("t1", "run-42", 4)
    assert str(erasure.event_id) == report["eventId"]
    data = erasure.data.model_dump(by_alias=True)
    assert (data["scope"], data["reason"], data["requestedBy"]) == ("subject", "asked", "dpo")
    assert data["subjectDigest"] == "sha256:" + hashlib.sha256(b"user-7").hexdigest()
    # without it a subject's erasure records nothing (as documented)
    code, out, err = run_cli(
        capsys, "erase", "--subject", "user-8", "--reason", "asked", *where
    )  # fmt: skip
    assert code == 0 and json.loads(out)["eventId"] is None, err


# --- runtrail projection list --limit ----------------------------------------------------------
def state_of(run_id: str, upto: int | None = None) -> RunProjection:
    events = full_run(run_id, "t1").events
    return replay(events[:upto] if upto else events)


def test_projection_list_limit_lists_at_most_that_many_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``projection list --limit N`` prints the first N runs (in the listing's order) of those
    the filters select. Ignored, a listing meant to be short floods the terminal or a script
    that reads N lines; applied before the filters, it drops runs the filter asked for. A
    limit that is not a positive number is refused, not read as no limit (SQLite) or a crash
    (PostgreSQL's "LIMIT must not be negative")."""
    url = sqlite_url(tmp_path / "projection.db")
    store = open_store(PROJECTIONS, url)
    done = [state_of(f"run-{i}") for i in range(0, 6, 2)]
    waiting = [state_of(f"run-{i}", 1) for i in range(1, 6, 2)]  # only accepted: not done
    store.apply_batch(ProjectionBatch(projections=done + waiting))
    store.close()

    def listed(*args: str) -> list[tuple[str, str]]:
        code, out, err = run_cli(capsys, "projection", "list", "--store", url, "--json", *args)
        assert code == 0, err
        return [(r["runId"], r["status"]) for r in map(json.loads, out.splitlines())]

    everything = listed()
    assert len(everything) == 6
    assert listed("--limit", "2") == everything[:2]
    assert listed("--limit", "6") == listed("--limit", "100") == everything
    succeeded = [row for row in everything if row[1] == "succeeded"]
    assert len(succeeded) == 3 and succeeded != everything[:3]
    assert listed("--status", "succeeded", "--limit", "2") == succeeded[:2]
    for wrong in ("0", "-1"):
        with pytest.raises(SystemExit) as refused:
            main(["projection", "list", "--store", url, "--limit", wrong])
        assert refused.value.code == 2
        assert "--limit" in capsys.readouterr().err


# --- runtrail otlp drops --limit ---------------------------------------------------------------
def test_otlp_drops_limit_lists_the_n_last_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``otlp drops --limit N`` prints the N rows last seen, of those the filters select.
    Ignored, an operator asking for the latest few gets up to 1000 rows; applied to the
    wrong end, the oldest ones, which say nothing about what is being dropped now."""
    import runtrail.drops.store as drops_store

    clock = itertools.count(1_790_000_000_000, 60_000)
    monkeypatch.setattr(drops_store, "_now_ms", lambda: next(clock))
    url = sqlite_url(tmp_path / "otlp-drops.db")
    store = open_store(OTLP_DROPS, url)
    for i in range(6):  # acme, globex, acme, …: each seen a minute after the one before
        tally = DropTally()
        tally.add(f"{i:032x}", "not-genai", f"GET /{i}", 1)
        store.add("acme" if i % 2 == 0 else "globex", tally)
    store.close()

    def runs(*args: str) -> list[str]:
        code, out, err = run_cli(capsys, "otlp", "drops", "--store-url", url, "--json", *args)
        assert code == 0, err
        return [row["runId"] for row in json.loads(out)]

    newest_first = [f"{i:032x}" for i in reversed(range(6))]
    assert runs() == newest_first
    assert runs("--limit", "2") == newest_first[:2]
    assert runs("--tenant", "acme", "--limit", "2") == [f"{4:032x}", f"{2:032x}"]
    code, out, _ = run_cli(capsys, "otlp", "drops", "--store-url", url, "--limit", "1")
    assert code == 0 and len(out.splitlines()) == 2 and f"{5:032x}" in out  # header and one
    for wrong in ("0", "-3"):
        with pytest.raises(SystemExit) as refused:
            main(["otlp", "drops", "--store-url", url, "--limit", wrong])
        assert refused.value.code == 2
        assert "--limit" in capsys.readouterr().err


# --- runtrail --version ------------------------------------------------------------------------
def test_version_prints_the_installed_version() -> None:
    """``runtrail --version`` prints ``runtrail VERSION``, the version installed (what a bug
    report must name), and exits 0 without needing a broker or a store. Ignored, the user
    gets a usage error, or a version the installed distribution does not have."""
    script = Path(sys.executable).with_name("runtrail")
    command = (
        [str(script)] if script.exists() else [sys.executable, "-m", "runtrail_tools.cli.main"]
    )
    done = subprocess.run(
        [*command, "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "RUNTRAIL_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"runtrail {version('runtrail')}\n"
    assert version("runtrail") == runtrail.__version__
