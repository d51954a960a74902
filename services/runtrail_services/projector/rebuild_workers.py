"""A rebuild folded by several processes at once, each owning whole partitions (``--workers``).

The rebuild is CPU-bound in one Python process (decode and fold), and runs are keyed by run ID
to a partition, so disjoint sets of partitions hold disjoint runs and can be folded apart.

How
  * The calling process captures the ranges (all partitions, up to the high watermarks) and
    checks the store is fresh, as the in-process rebuild does; then it spawns ``workers - 1``
    processes (spawned, never forked: its consumer has librdkafka threads) and folds too.
  * Partitions are handed out whole, one at a time: each spawned worker first folds one of
    the smallest partitions holding events (reserved for it: it starts about a second late —
    imports, codec, consumer — and so surely folds something); then every process, the caller
    first, takes the largest partition no process took yet (a counter shared by all), until
    none is left. A process keeps one fold and one consumer for all the partitions it takes,
    reading each between its captured offsets.
  * Each process writes its own batches — its runs' rows and the offsets of its partitions —
    into the one store, opened again by URL in a spawned worker (never an open connection
    across processes). SQLite serialises the writers (WAL, ``BEGIN IMMEDIATE``, a busy
    timeout), PostgreSQL by its row locks. A partition's last batch ends it at its captured
    watermark, as the in-process rebuild ends every partition. Sending the batches to the
    caller to write was not taken: on the benchmark's 300,000 events pickling and unpickling
    the batches cost more (0.13 s) than writing them (0.09 s), on top of the write, and all
    of it in one process.

What the caller checks
  * a run met in two partitions: the topic was not keyed by run ID (or a run's events were
    produced with different keys). No fold can order them (see :mod:`.rebuild`): two
    partitions of one process fail in that process's fold; for two processes each reports the
    runs it met and the partition it met each in (before each write), and the first run met by
    two fails the replay with :class:`RunInTwoWorkers` naming it and both partitions.
  * a worker that raises: its exception is raised here (its traceback as the cause); one that
    dies without a word (killed, out of memory): :class:`ReplayWorkerFailed`. Either way the
    other workers are terminated and nothing is reported as done.
  * Ctrl-C: workers ignore SIGINT, the caller terminates them; a worker whose parent is gone
    stops at its next progress tick.

The summary is the merge of the processes' (counts summed, halts and unreadable messages in
partition and offset order); progress lines add up the processes' latest counts.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtrail.config import Settings
from runtrail.events import EventCodec
from runtrail.persistence.kinds import PROJECTIONS
from runtrail.persistence.registry import open_store
from runtrail.projection import ProjectionStore
from runtrail.runtime.gc_tuning import service_gc
from runtrail_services.projector.folder import FolderOptions, RunKey
from runtrail_services.projector.interrupts import ctrl_c_sets
from runtrail_services.projector.partitioned_fold import (
    PartitionedFold,
    RunInTwoPartitions,
    split_run_message,
)
from runtrail_services.projector.replay_fold import (
    Progress,
    ReplaySummary,
    Unreadable,
    replay,
)
from runtrail_services.projector.topic_reader import BoundedTopicReader, PartitionRange

#: More processes than this gain nothing on one SQLite file (and cost a consumer each).
MAX_WORKERS = 8
#: The default folds in parallel from this many events on: a spawned worker needs about a
#: second (imports, codec, consumer) before it folds its first event, which a topic this size
#: repays on two cores (the in-process rebuild folds ~70,000 events a second).
PARALLEL_FROM = 100_000
#: How often a process reports its counts and checks the others (the caller prints at its own
#: interval).
_TICK_S = 0.25
#: How long a worker that exited may stay silent before it counts as dead (its last message
#: may still be in the pipe).
_SILENT_EXIT_S = 3.0
#: The consumer of a process reading one partition at a time: the partition is fetched much
#: faster than folded, so the consumer sits at its end most of the time, where the broker holds
#: each fetch this long (librdkafka's 500 ms would stall the move to the next partition by up
#: to that; 10 ms cost the broker three times the CPU of the in-process rebuild's read).
READER_CONFIG: dict[str, Any] = {"fetch.wait.max.ms": 50}
#: Waiting longer than this for the shared partition counter means its holder died holding it.
_TAKE_TIMEOUT_S = 30.0


class RunInTwoWorkers(RunInTwoPartitions):
    """A run turned up in partitions of two processes: folded apart, its projection is wrong."""


class ReplayWorkerFailed(RuntimeError):
    """A worker died, or failed with an exception that could not be sent back."""


class RemoteTraceback(Exception):
    """A worker's traceback, as the cause of its exception raised in the caller."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True, slots=True)
class Plan:
    """How many processes fold (the caller included), which partitions they take, and the
    stores by URL.

    Each spawned worker ``i`` (1 …) first folds ``reserved[i - 1]``, one of the smallest
    partitions holding events (it starts late, and it surely folds something: each process
    meets a share of the runs); then every process takes from ``shared``, largest first, the
    next partition no process took, until none is left."""

    processes: int
    shared: list[PartitionRange]
    reserved: list[PartitionRange]
    into_url: str
    snapshots_url: str | None

    @property
    def ranges(self) -> list[PartitionRange]:
        return sorted([*self.shared, *self.reserved], key=lambda r: r.partition)


def default_workers(ranges: Sequence[PartitionRange]) -> int:
    """One per CPU this process may use, at most one per partition holding events; one alone
    below :data:`PARALLEL_FROM` events, where starting processes costs more than it saves."""
    if sum(r.size for r in ranges) < PARALLEL_FROM:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    busy = sum(1 for r in ranges if r.size > 0)
    return max(1, min(cpus, busy, MAX_WORKERS))


def reopen_url(store: ProjectionStore) -> str | None:
    """A URL that opens ``store`` in another process, or None (in memory, a test double)."""
    url = getattr(store, "url", None)
    return url if isinstance(url, str) else None


def plan(
    ranges: Sequence[PartitionRange],
    workers: int | None,
    into: ProjectionStore,
    snapshots: ProjectionStore | None,
) -> Plan | None:
    """The parallel plan, or None: fold in this process alone (one worker asked, or only one
    partition holds events, or a store no other process can open)."""
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    wanted = default_workers(ranges) if workers is None else workers
    count = min(wanted, MAX_WORKERS, sum(1 for r in ranges if r.size > 0))
    into_url = reopen_url(into)
    snapshots_url = None if snapshots is None else reopen_url(snapshots)
    if count < 2 or into_url is None or (snapshots is not None and snapshots_url is None):
        return None
    # largest first, so the last ones taken are short; empty ones too (their end offsets)
    busy = sorted((r for r in ranges if r.size > 0), key=lambda r: (-r.size, r.partition))
    empty = [r for r in ranges if r.size <= 0]
    cut = len(busy) - (count - 1)
    reserved = busy[cut:][::-1]  # the smallest for worker 1
    return Plan(count, [*busy[:cut], *empty], reserved, into_url, snapshots_url)


# --- what every process runs ---------------------------------------------------------------------
class _MetRuns(set[RunKey]):
    """The fold's ``met`` set, also keeping the runs added since they were last reported."""

    def __init__(self, partition_of: dict[RunKey, int]) -> None:
        super().__init__()
        self.new: list[RunKey] = []
        self.partition_of = partition_of

    def add(self, key: RunKey) -> None:
        super().add(key)
        self.new.append(key)

    def take_new(self) -> list[tuple[RunKey, int]]:
        """The runs met since the last call, each with the partition it was met in."""
        new, self.new = self.new, []
        where = self.partition_of
        return [(key, where[key]) for key in new]


class _ReportingFold(PartitionedFold):
    """A process's fold: reports the runs it met before each write. The report does not wait
    for the caller, so a run met by two processes fails the replay soon after, not before,
    both have written it (the error says to delete the store)."""

    def __init__(self, before_write: Callable[[], None], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.runs: _MetRuns = _MetRuns(self.partition_of)
        self._before_write = before_write

    def write(self, offsets: dict[int, int]) -> None:
        self._before_write()
        super().write(offsets)


Send = Callable[[tuple[Any, ...]], None]


class _Share:
    """One process's share of the rebuild: takes partitions until none is left, folds them
    with one fold and one consumer, and sends what it met and counted through ``send``."""

    def __init__(
        self,
        index: int,
        reader: BoundedTopicReader,
        codec: EventCodec,
        into: ProjectionStore,
        snapshots: ProjectionStore | None,
        options: FolderOptions,
        *,
        write_every: int,
        tick_s: float,
        send: Send,
        tick: Callable[[], None],
    ) -> None:
        self.index = index
        self.reader = reader
        self.codec = codec
        self.topic = reader.topic
        self.fold = _ReportingFold(
            self._report, into, self.topic, **FolderOptions(**options, snapshots=snapshots)
        )
        self.write_every = write_every
        self.tick_s = tick_s
        self.send = send
        self.tick = tick
        self.ranges: list[PartitionRange] = []
        self.unreadable: list[Unreadable] = []
        self.events = 0  # of the partitions finished
        self.latest = (0, 0, 0)  # events, runs, halted at the last progress

    def run(self, take: Callable[[], PartitionRange | None]) -> ReplaySummary:
        with service_gc() as paced:
            while (task := take()) is not None:
                self.ranges.append(task)
                self.reader.ranges = [task]  # the same consumer, assigned this one partition
                part = ReplaySummary(topic=self.topic, ranges=[task])
                replay(
                    self.reader,
                    self.codec,
                    self.fold,
                    part,
                    paced,
                    self.write_every,
                    self._progress,
                    self.tick_s,
                )
                self.events += part.events
                self.unreadable += part.unreadable
        summary = ReplaySummary(
            topic=self.topic, ranges=self.ranges, events=self.events, unreadable=self.unreadable
        )
        self.fold.tally(summary)
        self.send(("done", self.index, self.fold.runs.take_new(), summary))
        return summary

    def _progress(self, p: Progress) -> None:
        self.latest = (self.events + p.events, p.runs, p.halted)
        self._report()
        self.tick()

    def _report(self) -> None:
        self.send(("progress", self.index, *self.latest, self.fold.runs.take_new()))


# --- the caller ----------------------------------------------------------------------------------
@dataclass
class _Process:
    index: int
    process: Any = None  # multiprocessing's SpawnProcess; None for the caller itself
    ranges: list[PartitionRange] = field(default_factory=list)
    events: int = 0
    runs: int = 0
    halted: int = 0
    summary: ReplaySummary | None = None
    exited_at: float | None = None

    @property
    def partitions(self) -> list[int]:
        return sorted(r.partition for r in self.ranges)


@dataclass(eq=False)
class _Caller:
    """The caller's side: the processes' messages, the runs each met, the progress lines."""

    processes: list[_Process]
    messages: Any
    total: int
    started: float
    on_progress: Callable[[Progress], None] | None
    progress_interval_s: float
    topic: str = ""
    #: the process and the partition each run was first met in
    owners: dict[RunKey, tuple[int, int]] = field(default_factory=dict, init=False)
    #: set by Ctrl-C (:func:`~.interrupts.ctrl_c_sets`): the next tick raises KeyboardInterrupt
    interrupted: threading.Event = field(default_factory=threading.Event, init=False)
    #: when the last progress line was reported (the start until the first)
    last_report: float = field(init=False)

    def __post_init__(self) -> None:
        self.last_report = self.started

    # messages
    def take(self, message: tuple[Any, ...]) -> None:
        kind, index = message[0], message[1]
        proc = self.processes[index]
        if kind == "progress":
            _, _, proc.events, proc.runs, proc.halted, met = message
            self._met(index, met)
        elif kind == "started":
            proc.ranges.append(message[2])
        elif kind == "done":
            _, _, met, summary = message
            proc.ranges = list(summary.ranges)
            self._met(index, met)
            proc.summary = summary
        elif kind == "error":
            _, _, error, text = message
            # a run met by two processes is the likelier cause of a conflict in the store, and
            # the clearer message: the other processes' runs may still be on their way
            self.drain(0.3)
            where = f"in the replay worker of partitions {proc.partitions}"
            if isinstance(error, BaseException):
                error.__cause__ = RemoteTraceback(text)
                error.add_note(where)
                raise error
            raise ReplayWorkerFailed(f"{error} ({where})") from RemoteTraceback(text)

    def _met(self, index: int, runs: Iterable[tuple[RunKey, int]]) -> None:
        setdefault = self.owners.setdefault
        for key, partition in runs:
            owner, first = setdefault(key, (index, partition))
            if owner != index:
                raise RunInTwoWorkers(split_run_message(self.topic, key, [first, partition]))

    def drain(self, seconds: float = 0.0) -> None:
        """Take the messages waiting (or arriving within ``seconds``)."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                left = deadline - time.monotonic()
                message = self.messages.get(timeout=left) if left > 0 else self.messages.get(False)
            except queue.Empty:
                return
            self.take(message)

    # the caller's own share ticks here, and the wait for the others
    def tick(self) -> None:
        if self.interrupted.is_set():
            raise KeyboardInterrupt
        self.drain()
        now = time.monotonic()
        for proc in self.processes:
            if proc.process is None or proc.summary is not None or proc.process.exitcode is None:
                continue
            proc.exited_at = proc.exited_at or now
            if now - proc.exited_at > _SILENT_EXIT_S or (
                proc.process.exitcode != 0 and now - proc.exited_at > 0.5
            ):
                raise ReplayWorkerFailed(
                    f"the replay worker {proc.index} (partitions {proc.partitions}) died "
                    f"(exit code {proc.process.exitcode}) without a result; the target store "
                    "is incomplete: delete it and rebuild"
                )
        if self.on_progress is not None and now - self.last_report >= self.progress_interval_s:
            self.on_progress(
                Progress(
                    sum(p.events for p in self.processes),
                    self.total,
                    sum(p.runs for p in self.processes),
                    sum(p.halted for p in self.processes),
                    now - self.started,
                )
            )
            self.last_report = now

    def wait(self) -> None:
        """Until every process has sent its summary (raises on any failure)."""
        while any(p.summary is None for p in self.processes):
            self.drain(0.1)
            self.tick()


def rebuild_in_workers(
    settings: Settings,
    plan: Plan,
    into: ProjectionStore,
    snapshots: ProjectionStore | None,
    *,
    options: FolderOptions,
    write_every: int,
    on_progress: Callable[[Progress], None] | None,
    progress_interval_s: float,
    interrupted: threading.Event | None = None,
) -> ReplaySummary:
    """Fold ``plan`` in this process and ``plan.processes - 1`` spawned ones; the merged
    summary (see the module doc). ``interrupted``: the Ctrl-C flag of the caller, if it
    installed one before (a Ctrl-C it took already stops the workers at the first tick)."""
    context = multiprocessing.get_context("spawn")
    messages: Any = context.Queue()
    counter: Any = context.Value("i", 0)
    shared = plan.shared
    total = sum(r.size for r in plan.ranges)
    processes = [_Process(index) for index in range(plan.processes)]
    started = time.monotonic()
    caller = _Caller(
        processes,
        messages,
        total,
        started,
        on_progress,
        progress_interval_s,
        topic=settings.events_topic,
    )
    reader: BoundedTopicReader | None = None
    # installed before the workers spawn: a Ctrl-C then is never lost in their start-up
    if interrupted is not None:
        caller.interrupted = interrupted
    with ctrl_c_sets(caller.interrupted):  # raised at the caller's next tick
        try:
            for proc in processes[1:]:
                job = _Job(
                    index=proc.index,
                    settings=settings,
                    first=plan.reserved[proc.index - 1],
                    shared=shared,
                    into_url=plan.into_url,
                    snapshots_url=plan.snapshots_url,
                    options=options,
                    write_every=write_every,
                    parent=os.getpid(),
                )
                proc.process = context.Process(
                    target=_work,
                    args=(job, messages, counter),
                    name=f"runtrail-replay-{proc.index}",
                    daemon=True,
                )
                proc.process.start()
            # made once the workers start theirs (each takes a fifth of a second or more)
            codec = EventCodec(settings.extra_schema_dirs)
            reader = BoundedTopicReader(
                settings, settings.events_topic, ranges=[], config=READER_CONFIG
            )
            share = _Share(
                0,
                reader,
                codec,
                into,
                snapshots,
                options,
                write_every=write_every,
                tick_s=_TICK_S,
                send=caller.take,
                tick=caller.tick,
            )

            def take() -> PartitionRange | None:
                task = _take(counter, shared)
                if task is not None:
                    processes[0].ranges.append(task)
                return task

            try:
                share.run(take)
            except Exception:
                caller.drain(0.3)  # a conflict in the store: was it a run met by two processes?
                raise
            caller.wait()
            # everything is written (closing is not timed, as in process)
            finished = time.monotonic()
            _stop(processes, grace_s=5.0)  # each sent its summary: let it close its store
        finally:
            _stop(processes)
            if reader is not None:
                reader.close()
            messages.close()
            messages.cancel_join_thread()
    summary = _merge(settings.events_topic, plan.ranges, processes)
    summary.seconds = finished - started
    if on_progress is not None:
        on_progress(
            Progress(summary.events, total, summary.runs, len(summary.halted), summary.seconds)
        )
    return summary


def _take(counter: Any, tasks: list[PartitionRange]) -> PartitionRange | None:
    """The next partition no process has taken, or None."""
    lock = counter.get_lock()
    if not lock.acquire(timeout=_TAKE_TIMEOUT_S):
        raise ReplayWorkerFailed("no partition could be taken: a worker died holding the counter")
    try:
        index = counter.value
        counter.value = index + 1
    finally:
        lock.release()
    return tasks[index] if index < len(tasks) else None


def _stop(processes: list[_Process], grace_s: float = 0.0) -> None:
    """Terminate the workers still running after ``grace_s`` (at once after a failure or
    Ctrl-C) and reap them all."""
    spawned = [p.process for p in processes if p.process is not None and p.process.pid]
    deadline = time.monotonic() + grace_s
    for process in spawned:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in spawned:
        if process.is_alive():
            process.terminate()
    for process in spawned:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)


def _merge(topic: str, ranges: list[PartitionRange], processes: list[_Process]) -> ReplaySummary:
    """The processes' summaries as one (halts and unreadable messages ordered by partition and
    offset); every partition must have been folded by exactly one of them."""
    merged = ReplaySummary(topic=topic, ranges=ranges, workers=len(processes))
    folded: list[int] = []
    for proc in processes:
        part = proc.summary
        assert part is not None
        folded += [r.partition for r in part.ranges]
        merged.events += part.events
        merged.applied += part.applied
        merged.duplicates += part.duplicates
        merged.skipped += part.skipped
        merged.runs += part.runs  # disjoint: a run met by two processes failed the replay
        merged.halted += part.halted
        merged.unreadable += part.unreadable
        merged.untrusted_snapshots += part.untrusted_snapshots
        merged.refused_snapshots += part.refused_snapshots
    if sorted(folded) != [r.partition for r in ranges]:
        raise ReplayWorkerFailed(
            f"partitions folded {sorted(folded)}, expected each of "
            f"{[r.partition for r in ranges]} once"
        )
    merged.halted.sort(key=lambda h: (h.coordinates.partition or 0, h.coordinates.offset or 0))
    merged.unreadable.sort(key=lambda u: (u.partition, u.offset))
    return merged


# --- a spawned worker ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Job:
    index: int
    settings: Settings
    first: PartitionRange
    shared: list[PartitionRange]
    into_url: str
    snapshots_url: str | None
    options: FolderOptions
    write_every: int
    parent: int


def _work(job: _Job, messages: Any, counter: Any) -> None:
    """A spawned worker's life: fold partitions until none is left, send the summary (or the
    error); exits 1 on an error."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's: it terminates us
    try:
        _fold(job, messages, counter)
    except BaseException as exc:
        text = "".join(traceback.format_exception(exc))
        try:
            pickle.loads(pickle.dumps(exc))
            error: object = exc
        except Exception:  # not every exception survives pickling
            error = f"{type(exc).__name__}: {exc}"
        messages.put(("error", job.index, error, text))
        messages.close()
        messages.join_thread()  # the message is in the pipe before this process ends
        sys.exit(1)
    messages.close()
    messages.join_thread()


def _fold(job: _Job, messages: Any, counter: Any) -> None:
    stores: list[ProjectionStore] = []
    reader: BoundedTopicReader | None = None
    try:
        into: ProjectionStore = open_store(PROJECTIONS, job.into_url)
        stores.append(into)
        snapshots: ProjectionStore | None = None
        if job.snapshots_url is not None:
            snapshots = open_store(PROJECTIONS, job.snapshots_url)
            stores.append(snapshots)
        codec = EventCodec(job.settings.extra_schema_dirs)
        reader = BoundedTopicReader(
            job.settings, job.settings.events_topic, ranges=[], config=READER_CONFIG
        )

        def tick() -> None:
            if os.getppid() != job.parent:
                raise SystemExit("the replay's calling process is gone")

        first: list[PartitionRange] = [job.first]

        def take() -> PartitionRange | None:
            task = first.pop() if first else _take(counter, job.shared)
            if task is not None:
                messages.put(("started", job.index, task))
            return task

        share = _Share(
            job.index,
            reader,
            codec,
            into,
            snapshots,
            job.options,
            write_every=job.write_every,
            tick_s=_TICK_S,
            send=messages.put,
            tick=tick,
        )
        share.run(take)
    finally:
        if reader is not None:
            reader.close()
        for store in stores:
            store.close()
