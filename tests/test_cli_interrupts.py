"""Long commands stopped or refused through the real CLI, as a subprocess on the real broker.

* ``replay projection --compare-with`` (or ``--snapshots``) of a store that does not exist exits
  2 naming it, and creates nothing (it used to create an empty live store and report every run
  as "only in the rebuild").
* A run whose events are in two partitions fails the replay (exit 2) with any ``--workers``,
  naming the run's own partitions: no fold can order them, one process included (it used to
  exit 0 with a row both succeeded and halted).
* Ctrl-C during ``replay projection`` says the ``--into`` store is incomplete, and a replay into
  it again is refused saying so; Ctrl-C during ``publish`` says how far it got, and the re-run
  it describes (the file again from line 1) doubles no run.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from runtrail.events import EventCodec
from runtrail.persistence import PROJECTIONS, open_store
from tests.projection_support import full_run
from tests.projector_support import forms, sqlite_url
from tests.publisher_support import read_all
from tests.support import encode

pytestmark = [pytest.mark.kafka]

EVENTS_TOPIC = {"message.timestamp.type": "LogAppendTime"}
#: how often one event of each partition is read again in the interrupted replay
REPEATS = 100_000


def _command(*argv: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from runtrail_tools.cli.main import main; raise SystemExit(main())",
        *argv,
    ]


def _run(cwd: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _command(*argv), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def _replay(bootstrap: str, topic: str, into: str, *extra: str) -> list[str]:
    return [
        "replay",
        "projection",
        "--into",
        into,
        "--bootstrap-servers",
        bootstrap,
        "--events-topic",
        topic,
        *extra,
    ]


def _produce(bootstrap: str, topic: str, items: list[tuple[int, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for partition, value in items:
        while True:
            try:
                producer.produce(topic, value=value, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def _replayed_versions(bootstrap: str, topic: str, tmp_path: Path) -> list[int]:
    """Each run's version in a projection replayed from ``topic``, which must hold no
    duplicate and halt no run."""
    rebuilt = sqlite_url(tmp_path / "rebuilt.db")
    replayed = _run(tmp_path, *_replay(bootstrap, topic, rebuilt, "--quiet"))
    assert replayed.returncode == 0, replayed.stderr
    assert "duplicates: 0" in replayed.stdout and "halted runs: 0" in replayed.stdout
    store = open_store(PROJECTIONS, rebuilt)
    try:
        return sorted(r.version for r in store.list(limit=100))
    finally:
        store.close()


def _rebuild_marked(path: Path, topic: str) -> bool:
    """Whether the rebuild into the SQLite store at ``path`` has set its mark (partition -1
    of the topic in the positions table: 0 until it finishes)."""
    if not path.exists():
        return False
    try:
        # a plain connection (it only reads): a read-only one cannot read the write-ahead log
        # the mark sits in until the rebuild's last checkpoint, so it saw the mark only then
        with closing(sqlite3.connect(path, timeout=1)) as db:
            found = db.execute(
                "SELECT 1 FROM runtrail_positions WHERE topic = ? AND partition = -1"
                " AND next_offset = 0",
                (topic,),
            ).fetchone()
    except sqlite3.Error:  # being made
        return False
    return found is not None


def _publishing(source: Path, publish: list[str], tmp_path: Path) -> subprocess.Popen[bytes]:
    """``runtrail publish SOURCE`` started in a session of its own (Ctrl-C is sent to it
    alone), with a spool folder of the test's."""
    return subprocess.Popen(
        _command("publish", str(source), *publish),
        cwd=tmp_path,
        env={**os.environ, "RUNTRAIL_SPOOL_DIR": str(tmp_path / "spool")},
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.fixture
def stopped() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Popen'd commands: killed (their session) if a test left one running."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# --- 1. a store the replay only reads must exist ------------------------------------------------
@pytest.mark.parametrize("flag", ["--compare-with", "--snapshots"])
def test_a_missing_store_to_read_is_refused_and_nothing_is_created(
    kafka_bootstrap: str, kafka_topic_factory: Any, tmp_path: Path, flag: str
) -> None:
    topic = kafka_topic_factory(2, config=EVENTS_TOPIC)
    _produce(kafka_bootstrap, topic, [(0, encode(f)) for f in forms(full_run("r1"))])
    done = _run(
        tmp_path,
        *_replay(kafka_bootstrap, topic, "sqlite:///shadow.db", flag, "sqlite:///live.db"),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "sqlite:///live.db" in lines[0], lines
    assert "does not exist" in lines[0]
    assert sorted(os.listdir(tmp_path)) == []  # neither live.db nor shadow.db
    # an existing one is read as before
    assert _run(tmp_path, *_replay(kafka_bootstrap, topic, "sqlite:///live.db")).returncode == 0
    done = _run(
        tmp_path,
        *_replay(kafka_bootstrap, topic, "sqlite:///shadow.db", flag, "sqlite:///live.db"),
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --- 2. a run in two partitions -----------------------------------------------------------------
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_run_in_two_partitions_fails_the_replay_with_any_workers(
    kafka_bootstrap: str, kafka_topic_factory: Any, tmp_path: Path, workers: str
) -> None:
    """The tester's topic: a run in partitions 0 and 1 of a 6-partition copy (one of its events
    also produced to partition 1), other runs in other partitions."""
    topic = kafka_topic_factory(6, config=EVENTS_TOPIC)
    split = forms(full_run("split"))
    items = [(0, encode(f)) for f in split] + [(1, encode(split[-1]))]
    for partition in range(6):
        items += [(partition, encode(f)) for f in forms(full_run(f"alone-{partition}"))]
    _produce(kafka_bootstrap, topic, items)
    into = sqlite_url(tmp_path / "rebuilt.db")
    done = _run(tmp_path, *_replay(kafka_bootstrap, topic, into, "--quiet", "--workers", workers))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "run t1/split has events in partitions [0, 1]" in done.stderr, done.stderr
    assert "cannot be rebuilt from this topic" in done.stderr
    assert "delete it" in done.stderr and "--workers 1" not in done.stderr
    # the store it left says it is incomplete when used again
    again = _run(tmp_path, *_replay(kafka_bootstrap, topic, into, "--quiet"))
    assert again.returncode == 2 and "never finished" in again.stderr, again.stderr
    assert into in again.stderr


# --- 3. Ctrl-C ----------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_in_a_replay_says_the_store_is_incomplete(
    kafka_bootstrap: str,
    kafka_topic_factory: Any,
    tmp_path: Path,
    workers: str,
    stopped: list[subprocess.Popen[bytes]],
) -> None:
    topic = kafka_topic_factory(2, config=EVENTS_TOPIC)
    # 2,000 runs, then one event read again and again: a replay of seconds, interrupted as
    # soon as the rebuild has marked its store (before its first write), so it is mid-way
    firsts = [forms(full_run(f"r{i}"))[0] for i in range(2000)]
    items = [(i % 2, encode(f)) for i, f in enumerate(firsts)]
    items += [(0, encode(firsts[0]))] * REPEATS + [(1, encode(firsts[1]))] * REPEATS
    _produce(kafka_bootstrap, topic, items)
    path = tmp_path / "rebuilt.db"
    into = sqlite_url(path)
    proc = subprocess.Popen(
        _command(*_replay(kafka_bootstrap, topic, into, "--workers", workers)),
        cwd=tmp_path,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    stopped.append(proc)
    deadline = time.monotonic() + 60
    while not _rebuild_marked(path, topic):
        assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGINT)
    out, rest = proc.communicate(timeout=60)
    err = rest.decode()
    assert proc.returncode == 130, err
    assert f"the --into store {into} is incomplete" in err and "delete it" in err, err
    assert "replayed" not in out.decode()  # no summary of a replay that did not finish
    # however far the fold got before it took the Ctrl-C, the store is never marked finished
    assert _rebuild_marked(path, topic)
    again = _run(tmp_path, *_replay(kafka_bootstrap, topic, into, "--quiet"))
    assert again.returncode == 2 and "never finished" in again.stderr, again.stderr
    assert "incomplete" in again.stderr and into in again.stderr


def _lines(runs: int, per_run: int) -> list[bytes]:
    """JSON-form lines with no eventId and no sequence: the publisher gives both."""
    out: list[bytes] = []
    for step in range(per_run):
        for r in range(runs):
            if step == 0:
                form: dict[str, Any] = {
                    "runId": f"run-{r}",
                    "type": "run.accepted",
                    "data": {"goalRef": "goal://g", "policyVersion": "p-1"},
                }
            else:
                form = {
                    "runId": f"run-{r}",
                    "type": "MODEL_REASONING",
                    "turnId": "turn-1",
                    "step": 1,
                    "data": {"text": f"thought {step}"},
                }
            out.append(orjson.dumps(form) + b"\n")
    return out


def test_ctrl_c_in_publish_says_how_far_it_got_and_how_to_send_the_rest(
    kafka_bootstrap: str,
    kafka_topic_factory: Any,
    tmp_path: Path,
    stopped: list[subprocess.Popen[bytes]],
) -> None:
    """The file is a FIFO the test writes: 1,000 lines, then Ctrl-C once all 1,000 are on
    the topic. Then the whole file (3,000 lines) is published with the --from-line the message
    gives: every run ends with each of its events once, numbered on from where it stopped.
    (Sent again from line 1, each run's first events would come back under new eventIds at
    sequences the run holds, and a replay halts every run: ``invalid-transition … claims the
    same sequence``.)"""
    topic = kafka_topic_factory(2, config=EVENTS_TOPIC)
    lines = _lines(runs=20, per_run=150)
    lines[1500:1500] = [b"not json\n"]  # rejected, in the part sent after the interruption
    lines[500:500] = [b'{"runId": "run-0", "type": "no.such.type"}\n']  # rejected: no number
    fifo = tmp_path / "events.jsonl"
    os.mkfifo(fifo)
    publish = ["--topic", topic, "--bootstrap-servers", kafka_bootstrap, "--tenant", "t1"]
    proc = _publishing(fifo, publish, tmp_path)
    stopped.append(proc)
    with open(fifo, "wb") as writer:
        writer.writelines(lines[:1001])  # 1,000 events and a rejected line
        writer.flush()
        assert len(read_all(kafka_bootstrap, topic, 1000)) == 1000
        os.kill(proc.pid, signal.SIGINT)  # blocked reading line 1,002
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    text = err.decode()
    assert "interrupted after line 1,001 of" in text and str(fifo) in text, text
    assert "1,000 event(s) accepted, 1,000 confirmed by the broker, 0 kept in the spool" in text
    assert "--from-line 1002" in text and "sequence-conflict" in text
    assert "interrupted after line 1,001: accepted 1,000, sent 1,000, spooled 0, rejected 1" in (
        out.decode()
    )
    # what the message says to do, on the whole file
    fifo.unlink()
    whole = tmp_path / "events.jsonl"
    whole.write_bytes(b"".join(lines))
    done = _run(tmp_path, "publish", str(whole), "--from-line", "1002", *publish)
    assert done.returncode == 1 and "sent 2000, spooled 0, rejected 1" in done.stdout, done
    assert done.stderr.startswith("line 1502: invalid-json"), done.stderr
    codec = EventCodec()
    events = [codec.decode(m.value()).event for m in read_all(kafka_bootstrap, topic, 3000)]
    assert len(events) == 3000
    assert Counter((e.run_id, e.sequence) for e in events) == {
        (f"run-{r}", s): 1 for r in range(20) for s in range(1, 151)
    }
    assert _replayed_versions(kafka_bootstrap, topic, tmp_path) == [150] * 20


def _on_topic(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4()}"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
            for p in range(partitions)
        )
    finally:
        consumer.close()


def test_ctrl_c_mid_file_stops_between_lines_and_the_rest_follows_without_a_gap(
    kafka_bootstrap: str,
    kafka_topic_factory: Any,
    tmp_path: Path,
    stopped: list[subprocess.Popen[bytes]],
) -> None:
    """The tester's case: a large file, Ctrl-C while lines are being published. The command
    stops between two lines and says which; all it accepted is on the topic; --from-line sends
    the rest and every run is whole, in order, with no sequence twice or missing."""
    topic = kafka_topic_factory(2, config=EVENTS_TOPIC)
    lines = _lines(runs=50, per_run=800)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(lines))
    publish = ["--topic", topic, "--bootstrap-servers", kafka_bootstrap, "--tenant", "t1"]
    proc = _publishing(path, publish, tmp_path)
    stopped.append(proc)
    deadline = time.monotonic() + 60
    while _on_topic(kafka_bootstrap, topic, 2) < 3000:
        assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    found = re.search(rb"interrupted after line ([\d,]+): accepted ([\d,]+), sent ([\d,]+)", out)
    assert found is not None, out + err
    line, accepted, sent = (int(g.replace(b",", b"")) for g in found.groups())
    assert 3000 <= line < len(lines) and accepted == sent == line, (line, accepted, sent)
    assert _on_topic(kafka_bootstrap, topic, 2) == sent  # nothing lost, nothing more
    assert f"--from-line {line + 1}".encode() in err
    done = _run(tmp_path, "publish", str(path), "--from-line", str(line + 1), *publish)
    assert done.returncode == 0, done.stderr
    assert f"sent {len(lines) - line}, spooled 0, rejected 0" in done.stdout
    assert _replayed_versions(kafka_bootstrap, topic, tmp_path) == [800] * 50
