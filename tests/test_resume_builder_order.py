"""The resume-cache builder applies events in sequence order (issue 11 item 6).

Before, deltas were joined in arrival order and 61 of the figure's entries held wrong
content. A cache entry has no "incomplete" flag, so a node a gap touched yields no entry.
"""

from __future__ import annotations

from runtrail.events import Event
from runtrail.nodes import RunSequencer
from runtrail.resume.builder import EntryBuilder, EntryKey, WriteBatch
from runtrail.resume.entry import CacheEntry
from tests.capture_support import RunEvents, prompt
from tests.node_order_support import disorder, long_run


def build(events: list[Event], builder: EntryBuilder | None = None) -> dict[EntryKey, CacheEntry]:
    builder = builder or EntryBuilder()
    out = WriteBatch()
    for offset, event in enumerate(events):
        builder.feed(event, 0, out, offset)
    builder.expire(10**9, out)
    return out.entries


def test_swapped_deltas_are_joined_in_sequence_order() -> None:
    run = RunEvents()
    events = [run.request(prompt()), run.response("Hel"), run.response("lo"), run.step_end()]
    [entry] = build([events[0], events[2], events[1], events[3]]).values()
    assert entry.result["message"] == "Hello"


def test_a_node_a_gap_touched_yields_no_entry_and_is_counted() -> None:
    run = RunEvents()
    events = [run.request(prompt()), run.response("a"), run.response("b"), run.step_end()]
    builder = EntryBuilder(RunSequencer(window=1))
    assert build([events[0], events[2], events[3]], builder) == {}
    assert builder.dropped == {"sequence-gap": 1}


def test_a_re_read_after_a_restart_skips_what_the_store_applied() -> None:
    run = RunEvents()
    events = [run.request(prompt()), run.response("Hel"), run.response("lo"), run.step_end()]
    builder = EntryBuilder(
        RunSequencer(anchor=lambda tenant, run_id: 2)
    )  # the store applied 1 and 2
    first = WriteBatch()
    builder.feed(events[0], 0, first, 0)  # re-read: skipped
    assert builder.dropped == {"duplicate": 1}
    assert first.models == {}


def test_figure_10k_events_200_gaps_289_swaps_every_entry_is_the_sequence_orders() -> None:
    events = long_run()
    oracle = build(events)
    mixed = build(disorder(events).arrival)
    assert len(mixed) > len(oracle) * 0.6
    wrong = [k for k, entry in mixed.items() if oracle.get(k) != entry]
    assert wrong == []
