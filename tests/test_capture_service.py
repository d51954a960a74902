"""The capture service driven directly through the runtime's contract (no broker here).

What the runtime relies on: records reach the sink and are durable after ``flush``; commit
points are the pairer's holds with their metadata, handed to the checkpoint at each flush;
``on_assigned`` resumes from the group's commit so a re-read writes no truncated copy; ``tick`` expires idle nodes; ``on_revoked`` drops state; metrics move.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from prometheus_client import CollectorRegistry

from runtrail.capture import InMemoryIoCaptureSink, NodeIoRecord, NodePairer, read_records
from runtrail.capture.holds import decode_marks, encode_marks
from runtrail.capture.pairer import wall_ms
from runtrail.config import Settings
from runtrail.events import Event
from runtrail.runtime import Delivered, ServiceContext
from runtrail.runtime.checkpoint import Checkpoint
from runtrail.runtime.registry import service_class
from runtrail.runtime.runner import ServiceRunner
from runtrail_services.capture.service import CaptureService
from runtrail_services.capture.settings import CaptureSettings, default_sink_url
from tests.capture_support import RunEvents, feed_all, model_step, prompt
from tests.checkpoint_support import GroupCommits, held, held_metadata

TOPIC = "events"


def make_service(
    tmp_path: Path, group: GroupCommits | None = None, **options: str
) -> CaptureService:
    context = ServiceContext(
        settings=Settings(state_dir=tmp_path / "state"),
        options={"sink_url": "memory://", **options},
        registry=CollectorRegistry(),
        checkpoint=Checkpoint(group if group is not None else GroupCommits()),
    )
    return CaptureService(context)


def deliver(
    events: Iterable[Event], partition: int = 0, start: int = 0, topic: str = TOPIC
) -> list[Delivered]:
    return [
        Delivered(e, {}, topic, partition, offset, 0, e.run_id.encode())
        for offset, e in enumerate(events, start)
    ]


def memory(service: CaptureService) -> InMemoryIoCaptureSink:
    assert isinstance(service.sink, InMemoryIoCaptureSink)
    return service.sink


def sample(service: CaptureService, name: str, **labels: str) -> float:
    value = service.context.registry.get_sample_value(name, {"service": "capture", **labels})
    return value or 0.0


def a_run() -> list[Event]:
    run = RunEvents("run-a")
    return [
        run.event("run.accepted", {"goalRef": "goal://a", "policyVersion": "p1"}, step=None),
        run.request(prompt()),
        run.reasoning("think"),
        run.response("The answer", None),
        run.response(" is 4.", {"usage": {"prompt_tokens": 5, "completion_tokens": 2}}),
        run.call("c1", "calc", {"x": 1}),
        run.result("c1", "calc", 4),
        run.step_end(),
        run.result(None, None, "orphan"),
        run.event("run.succeeded", {"resultRef": "blob://a"}, step=None),
    ]


def test_the_service_is_registered_under_its_name() -> None:
    assert service_class("capture") is CaptureService


def test_records_equal_the_pairers_and_other_event_types_are_ignored(tmp_path: Path) -> None:
    events = a_run()
    service = make_service(tmp_path)
    service.process(deliver(events))
    service.flush()
    expected = feed_all(NodePairer(), events)
    assert [r.node_type for r in expected] == ["TOOL", "MODEL", "TOOL"]
    assert memory(service).records() == expected
    assert sample(service, "runtrail_capture_records_total", node_type="MODEL") == 1
    assert sample(service, "runtrail_capture_records_total", node_type="TOOL") == 2
    assert sample(service, "runtrail_capture_sink_flush_seconds_count") == 1
    # the non-runtime events still move the commit point: nothing is held past them
    assert held(service) == {}


def test_records_are_on_disk_only_after_flush(tmp_path: Path) -> None:
    url = (tmp_path / "capture").as_uri()
    service = make_service(tmp_path, sink_url=url)
    service.process(deliver(a_run()))
    assert read_records(url) == []  # buffered: the runtime must not commit yet
    service.flush()
    assert [r.run_id for r in read_records(url)] == ["run-a"] * 3
    service.close()


def test_commit_points_are_the_holds_with_their_metadata(tmp_path: Path) -> None:
    a, b = RunEvents("run-a"), RunEvents("run-b")
    service = make_service(tmp_path)
    service.process(
        deliver([a.call("c", "t", {}), b.request(prompt()), a.step_end(), a.result("c", "t", 1)])
    )
    service.process(deliver([RunEvents("run-c").call("k", "t", {})], partition=3, start=40))
    assert held(service) == {(TOPIC, 0): 1, (TOPIC, 3): 40}
    metadata = held_metadata(service)
    assert set(metadata) == {(TOPIC, 0)}  # partition 3 straddles nothing
    assert decode_marks(1, metadata[(TOPIC, 0)]) == [3]  # run-a's node ended at 3
    service.process(deliver([b.step_end()], start=4))
    assert held(service) == {(TOPIC, 3): 40}


def test_a_restart_at_the_commit_point_rewrites_identical_records_only(tmp_path: Path) -> None:
    runs = [RunEvents(f"run-{i}") for i in range(3)]
    events: list[Event] = []
    for step in (1, 2):  # three runs' steps interleaved, so nodes straddle every commit point
        for run in runs:
            events += [run.call(f"c{step}", "t", {}, step=step)]
            events += [run.request(prompt(), step=step), run.response("a", step=step)]
        for run in runs:
            events += [run.response("b", {"usage": {"input": 1}}, step=step)]
            events += [run.result(f"c{step}", "t", step, step=step), run.step_end(step=step)]
    first = make_service(tmp_path)
    first.process(deliver(events[:14]))
    point = held(first)[(TOPIC, 0)]
    metadata = held_metadata(first).get((TOPIC, 0))
    assert metadata, "the scenario must have a straddling node"
    first.process(deliver(events[14:], start=14))

    # the crash: a new process, resumed from the group's commit point
    second = make_service(tmp_path, GroupCommits({(TOPIC, 0): (point, metadata)}))
    second.on_assigned([(TOPIC, 0)])
    second.process(deliver(events[point:], start=point))
    second.tick(wall_ms() + 10_000)  # runs picked up mid-way wait a little for their order
    before = {r.record_id: r for r in memory(first).records()}
    again = memory(second).records()
    assert again, "the re-read must re-form the nodes that were open at the commit point"
    assert all(before.get(r.record_id) == r for r in again), "a truncated or changed copy"
    assert len(before) == 12


def test_without_the_metadata_a_reread_would_write_a_truncated_copy(tmp_path: Path) -> None:
    """The control for the test above: it fails if metadata stops mattering."""
    a, b = RunEvents("run-a"), RunEvents("run-b")
    events = [a.call(None, "t", {"n": 1}), b.request(prompt()), a.call(None, "t", {"n": 2})]
    events += [a.result(None, "t", 1), a.result(None, "t", 2), b.step_end()]
    service = make_service(tmp_path, GroupCommits({(TOPIC, 0): (1, None)}))
    service.on_assigned([(TOPIC, 0)])
    service.process(deliver(events[1:], start=1))
    service.tick(wall_ms() + 10_000)
    reference = {r.record_id for r in feed_all(NodePairer(), events)}
    assert any(r.record_id not in reference for r in memory(service).records())


def test_nothing_committed_starts_clean_and_bad_metadata_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    group = GroupCommits()
    service = make_service(tmp_path, group)
    service.process(deliver([RunEvents().request(prompt())], start=5))
    service.on_assigned([(TOPIC, 0)])  # the group has committed nothing
    assert held(service) == {}
    group[(TOPIC, 1)] = (7, "rtc1:??")
    with caplog.at_level(logging.ERROR):
        service.on_assigned([(TOPIC, 1)])
    assert "unreadable commit metadata" in caplog.text
    service.process(deliver(model_step(RunEvents()), partition=1, start=7))
    assert len(memory(service)) == 1


def test_idle_nodes_are_flushed_incomplete_by_tick(tmp_path: Path) -> None:
    run = RunEvents()
    service = make_service(tmp_path, idle_flush_s="1")
    service.process(deliver([run.request(prompt()), run.response("partial")]))
    service.process(deliver([RunEvents("run-2").call("c1", "t", {})], partition=1))
    now = wall_ms()
    service.tick(now + 500)
    assert len(memory(service)) == 0
    assert sample(service, "runtrail_capture_open_nodes") == 2
    service.tick(now + 2_000)
    records = memory(service).records()
    assert sorted((r.node_type, r.incomplete) for r in records) == [
        ("MODEL", True),
        ("TOOL", True),
    ]
    model = memory(service).records("MODEL")[0]
    assert model.output_text == "partial"
    assert sample(service, "runtrail_capture_incomplete_total", node_type="MODEL") == 1
    assert sample(service, "runtrail_capture_incomplete_total", node_type="TOOL") == 1
    assert sample(service, "runtrail_capture_open_nodes") == 0
    assert held(service) == {}


def test_revoked_partitions_drop_their_open_nodes(tmp_path: Path) -> None:
    service = make_service(tmp_path)
    service.process(deliver([RunEvents("a").request(prompt())], partition=0, start=3))
    service.process(deliver([RunEvents("b").request(prompt())], partition=1, start=8))
    service.on_revoked([(TOPIC, 0)])
    assert held(service) == {(TOPIC, 1): 8}
    service.tick(wall_ms())
    assert sample(service, "runtrail_capture_open_nodes") == 1


def test_partitions_of_two_topics_do_not_mix(tmp_path: Path) -> None:
    service = make_service(tmp_path)
    run = RunEvents()
    service.process(deliver([run.request(prompt())], topic="x"))
    service.process(deliver([run.step_end()], topic="y"))  # not the same node: another topic
    # on y the run starts at sequence 2: that event waits (and holds) for its predecessor
    assert held(service) == {("x", 0): 0, ("y", 0): 0}
    assert len(memory(service)) == 0


# --- through the runtime's commit path ---------------------------------------------------------
class RecordingConsumer:
    """Stands in for the Kafka consumer at commit time: remembers what was sent to commit
    (the runtime commits asynchronously; what is sent is what this test is about)."""

    def __init__(self) -> None:
        self.commits: list[tuple[str, int, int, str | None]] = []
        self.group = GroupCommits()

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.commits += [(o.topic, o.partition, o.offset, o.metadata) for o in offsets]

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        points = self.group([(p.topic, p.partition) for p in partitions])
        return [TopicPartition(t, p, o, m) for (t, p), (o, m) in points.items()]


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[tuple[ServiceRunner, RecordingConsumer]]:
    """A real runtime around the capture service, never connected: commits are recorded."""
    settings = Settings(bootstrap_servers="127.0.0.1:9", state_dir=tmp_path)
    runner = ServiceRunner(
        CaptureService,
        settings,
        service_name="capture",
        options={"sink_url": "memory://"},
        metrics_port=0,
    )
    runner._consumer.close()
    recorder = RecordingConsumer()
    runner._consumer = recorder  # type: ignore[assignment]
    yield runner, recorder
    runner._http._server.server_close()  # bound, never started


def test_the_runtime_commits_the_hold_with_its_metadata(
    runner: tuple[ServiceRunner, RecordingConsumer],
) -> None:
    runtime, recorder = runner
    a, b = RunEvents("run-a"), RunEvents("run-b")
    runtime.service.process(
        deliver([a.call("c", "t", {}), b.request(prompt()), a.step_end(), a.result("c", "t", 1)])
    )
    runtime.checkpoint.reached({(TOPIC, 0): 4})
    runtime.commits.commit(runtime._consumer, force=True)
    assert recorder.commits == [(TOPIC, 0, 1, encode_marks(1, [3]))]


def test_a_hold_at_the_position_keeps_its_metadata(
    runner: tuple[ServiceRunner, RecordingConsumer],
) -> None:
    """Resumed at 5 with a straddler ending at 7, having read only a foreign event at 5: the
    commit point is the position itself, and losing its mark would let a later restart
    capture the straddler's tail as a truncated node."""
    runtime, recorder = runner
    service = runtime.service
    recorder.group[(TOPIC, 0)] = (5, encode_marks(5, [7]))
    service.on_assigned([(TOPIC, 0)])
    other = RunEvents("run-x").event("run.accepted", {"goalRef": "g", "policyVersion": "p"})
    service.process(deliver([other], start=5))
    runtime.checkpoint.reached({(TOPIC, 0): 6})
    runtime.commits.commit(runtime._consumer, force=True)
    assert recorder.commits == [(TOPIC, 0, 6, encode_marks(6, [7]))]


# --- settings -----------------------------------------------------------------------------------
def test_options_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNTRAIL_CAPTURE_IDLE_FLUSH_S", "30")
    monkeypatch.setenv("RUNTRAIL_CAPTURE_MAX_BYTES", "1000")
    assert CaptureSettings.load().idle_flush_s == 30
    settings = CaptureSettings.load({"idle_flush_s": "5"})
    assert (settings.idle_flush_s, settings.max_bytes) == (5, 1000)
    with pytest.raises(ValueError, match="unknown capture option"):
        CaptureSettings.load({"idle_flush": "5"})


def test_sink_options_must_fit_the_sink(tmp_path: Path) -> None:
    settings = CaptureSettings.load({"max_bytes": "10", "buffer_bytes": "0"})
    assert settings.sink_options("file:///x") == {"max_bytes": 10, "buffer_bytes": 0}
    with pytest.raises(ValueError, match="max_bytes does not apply to a s3:// sink"):
        settings.sink_options("s3://bucket/p")
    zstd = CaptureSettings.load({"compression": "zstd"})
    assert zstd.sink_options("s3://bucket/p") == {"compression": "zstd"}
    assert settings.resolved_sink_url(tmp_path) == (tmp_path / "capture").as_uri()
    assert default_sink_url(tmp_path) == f"file://{tmp_path.resolve()}/capture"


def test_the_default_sink_is_jsonl_under_the_state_dir(tmp_path: Path) -> None:
    context = ServiceContext(settings=Settings(state_dir=tmp_path), registry=CollectorRegistry())
    service = CaptureService(context)
    service.process(deliver(model_step(RunEvents())))
    service.close()
    records: Sequence[NodeIoRecord] = read_records((tmp_path / "capture").as_uri())
    assert [r.node_type for r in records] == ["MODEL"]
