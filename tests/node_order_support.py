"""A long run delivered out of order, and its sequence-order oracle (issue 11 item 6).

Named after the node tests that use it; no tests here. The run is deterministic: steps with
a streamed, reasoned model call (some retried), tool calls (some said twice), then
``swaps`` adjacent exchanges and ``gaps`` events that never come in time (half lost, half
delivered far beyond the reorder window).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from runtrail.events import Event
from tests.capture_support import RunEvents, prompt


def long_run(events: int = 10_000, seed: int = 11, run_id: str = "run-long") -> list[Event]:
    """About ``events`` events of one run, in sequence order."""
    rng = random.Random(seed)
    run = RunEvents(run_id, tick_ms=10)
    out: list[Event] = []
    step = 0
    while len(out) < events:
        step += 1
        out.append(run.request(prompt(text=f"question {step}"), step=step))
        if rng.random() < 0.1:
            out.append(run.response("broken ", step=step))
            out.append(run.retry(1, "stream broke", step=step))
            out.append(run.request(prompt(text=f"question {step} again"), step=step))
        for index in range(rng.randint(0, 3)):
            out.append(run.reasoning(f"thought {step}.{index}", step=step))
        for index in range(rng.randint(1, 12)):
            out.append(run.response(f"<{step}.{index}>", step=step))
        usage = {"prompt_tokens": step, "completion_tokens": rng.randint(1, 99)}
        out.append(run.response(None, {"id": f"r{step}", "usage": usage}, step=step))
        for call in range(rng.randint(0, 2)):
            call_id = f"call-{step}-{call}"
            out.append(run.call(call_id, "search", {"q": f"{step}/{call}"}, step=step))
            if rng.random() < 0.2:
                out.append(run.call(call_id, "search", {"q": f"{step}/{call}"}, step=step))
            out.append(run.result(call_id, "search", f"hit {step}/{call}", step=step))
        out.append(run.step_end(step=step))
    return out


@dataclass
class Disorder:
    """What was done to the stream: arrival order, and the sequences that came too late."""

    arrival: list[Event]
    lost: set[int]
    delayed: set[int]


def disorder(
    events: list[Event], gaps: int = 200, swaps: int = 289, delay: int = 1500, seed: int = 5
) -> Disorder:
    """Arrival order with ``swaps`` adjacent swaps and ``gaps`` late or lost events."""
    rng = random.Random(seed)
    arrival = list(events)
    holes = rng.sample(range(1, len(arrival) - 1), gaps)
    lost = set(holes[: gaps // 2])
    delayed = set(holes[gaps // 2 :])
    late = [(i + delay, arrival[i]) for i in sorted(delayed)]
    kept = [e for i, e in enumerate(arrival) if i not in lost and i not in delayed]
    free = list(range(len(kept) - 1))
    rng.shuffle(free)
    used: set[int] = set()
    done = 0
    for i in free:
        if done == swaps:
            break
        if i in used or i + 1 in used:
            continue
        kept[i], kept[i + 1] = kept[i + 1], kept[i]
        used.update((i, i + 1))
        done += 1
    for position, event in sorted(late, key=lambda p: p[0], reverse=True):
        kept.insert(min(position, len(kept)), event)
    return Disorder(
        kept,
        {events[i].sequence for i in lost},
        {events[i].sequence for i in delayed},
    )
