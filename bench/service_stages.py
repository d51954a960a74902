"""Where the audit and sessions services spend their CPU, stage by stage, without Kafka.

    python -m bench.service_stages --events 40000

The services' rates through the runtime (``bench.services_baseline``) say how fast; this says
what each event costs in each stage, unprofiled (``time.process_time`` around each stage, so
C work such as SQLite's counts at its real weight, which cProfile shrinks beside Python calls):

* **audit**: the decode straight to events (the runtime's path for a service that does not
  read the written form), sealing (the store's lookups for eventIds already sealed, the
  RFC 8785 bytes of the form as written from each body, SHA-256, the bookkeeping), the
  store's append (one transaction per flush of ``--flush`` links), the export lines sent to
  the audit topic (built, not produced), under the runtime's collector policy;
* **sessions**: the compiled decode straight to events, applying them to their sessions
  (each event's RFC 8785 bytes, written from the event and kept for the snapshot), both a
  chunk of 250 at a time as the runtime hands a batch over (``PROCESS_CHUNK``), building
  the snapshots each batch of 2,000 events makes due (sealed and joined into their stored
  form, as a save does before it writes; not written), and the cyclic GC's work
  at each flush under the runtime's policy for a service that keeps its state
  (``Service.keeps_state``), then under the default one for comparison.

The figures budget the target of 50,000 events/s a service: 20 µs of CPU an event in all.
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.workload import workload
from runtrail.events import EventCodec
from runtrail.runtime.service import PROCESS_CHUNK

RECORDED_AT = "2026-01-01T00:00:00.000Z"
#: the sessions service's batch (``SessionsService.batch_size``): it saves the sessions a
#: batch made due (at a STEP_END) at the batch's end, each session once; the runtime hands
#: the batch to it ``PROCESS_CHUNK`` events at a time
SAVE_BATCH = 2000


class Stages:
    """CPU seconds per named stage."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.process_time()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.process_time() - start

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.stage(name):
                return fn(*args, **kwargs)

        return timed

    def report(self, title: str, events: int) -> None:
        parts = "  ".join(f"{k} {1e6 * v / events:.1f}" for k, v in self.seconds.items())
        print(f"{title:19s} µs CPU/event: {parts}", flush=True)


def audit(values: list[bytes], flush: int, batch: int) -> Stages:
    from confluent_kafka import Message

    from runtrail.audit.store_sqlite import SqliteLinkStore
    from runtrail.runtime.delivery import Delivered
    from runtrail.runtime.gc_tuning import service_gc
    from runtrail_services.audit.heads import HeadCache
    from runtrail_services.audit.messages import link_messages
    from runtrail_services.audit.sealing import Sealer

    codec = EventCodec()
    stages = Stages()
    with tempfile.TemporaryDirectory() as scratch:
        store = SqliteLinkStore(Path(scratch) / "audit.db")
        store.find_events = stages.wrap("seal: sealed? (store)", store.find_events)  # type: ignore[method-assign]
        sealer = Sealer(
            store, HeadCache(store, 1_000_000), lambda *args: None, codec.written_canonical
        )
        messages = [Message(value=value) for value in values]  # as consumed, made untimed
        with service_gc() as paced:  # the runtime's policy for a service (gc_tuning)
            for start in range(0, len(values), flush):
                delivered = []
                with stages.stage("decode"):
                    for offset, message in enumerate(messages[start : start + flush], start):
                        event = codec.decode_event_only(message.value(), RECORDED_AT)
                        delivered.append(Delivered(event, None, "t", 0, offset, 0, None, message))
                with stages.stage("seal (all)"):
                    for first in range(0, len(delivered), batch):
                        sealer.seal_batch(delivered[first : first + batch])
                pending = sealer.pending
                with stages.stage("append"):
                    store.append_batch(pending.new_links(), {("t", 0): start + len(delivered)})
                with stages.stage("export lines"):
                    for _ in link_messages(pending.all_links()):
                        pass
                sealer.flushed()
                del delivered, pending  # the runtime holds neither past its flush
                with stages.stage("gc at flush"):
                    paced.after_flush()
        store.close()
    return stages


def sessions(values: list[bytes], flush: int, *, freeze: bool) -> Stages:
    from runtrail.runtime.gc_tuning import service_gc
    from runtrail.sessions import AgentSession
    from runtrail.sessions.session import STEP_END

    codec = EventCodec()
    stages = Stages()
    held: dict[tuple[str, str], AgentSession] = {}
    with service_gc(freeze_survivors=freeze) as paced:
        for start in range(0, len(values), flush):
            end = min(start + flush, len(values))
            for first in range(start, end, SAVE_BATCH):
                due: dict[tuple[str, str], AgentSession] = {}
                # as the runtime hands a batch over: decoded and applied a chunk at a time
                for chunk in range(first, min(first + SAVE_BATCH, end), PROCESS_CHUNK):
                    with stages.stage("decode"):
                        events = [
                            codec.decode_event_only(v, RECORDED_AT)
                            for v in values[chunk : chunk + PROCESS_CHUNK]
                        ]
                    with stages.stage("apply"):
                        for offset, event in enumerate(events, chunk):
                            if not event.session_id:
                                continue
                            key = (event.tenant_id, event.session_id)
                            session = held.get(key)
                            if session is None:
                                session = held[key] = AgentSession(*key)
                            session.apply(event, source=("t", 0, offset))
                            if event.type == STEP_END:
                                due[key] = session
                    del events
                with stages.stage("snapshots"):
                    for session in due.values():
                        session.snapshot().to_bytes()
            with stages.stage("gc at flush"):
                paced.after_flush()
    return stages


PARTS = ("audit", "sessions", "sessions-default-gc")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--flush", type=int, default=5_000, help="events between flushes")
    parser.add_argument("--batch", type=int, default=250, help="audit: events a batch")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", choices=PARTS, help="one part, in this process")
    args = parser.parse_args()
    if args.only is None:  # each part in a fresh process: none inherits another's heap
        for _ in range(args.rounds):
            for part in PARTS:
                cmd = [sys.executable, "-m", "bench.service_stages", "--only", part]
                cmd += ["--events", str(args.events), "--flush", str(args.flush)]
                subprocess.run([*cmd, "--batch", str(args.batch)], check=True)
        return
    codec = EventCodec()
    values = [codec.encode_json_form(form) for form in workload(args.events)]
    gc.collect()
    if args.only == "audit":
        audit(values, args.flush, args.batch).report("audit", args.events)
    else:
        freeze = args.only == "sessions"  # the runtime's policy for sessions, or the default
        sessions(values, args.flush, freeze=freeze).report(args.only, args.events)


if __name__ == "__main__":
    main()
