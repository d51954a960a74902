"""The node assembly on its own: what it tells a listener, and the open nodes' lowest offsets."""

from __future__ import annotations

from runtrail.events import Event
from runtrail.nodes import Node, NodeAssembly, NodeListener
from tests.capture_support import RunEvents, prompt


class Log(NodeListener):
    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []

    def opened(self, node: Node) -> None:
        self.said.append(("opened", node.node_type))

    def superseded(self, old: Node, new: Node) -> None:
        self.said.append(("superseded", f"{old.serial}->{new.serial}"))

    def closed(self, node: Node) -> None:
        self.said.append(("closed", node.node_type))

    def dropped(self, reason: str, count: int = 1) -> None:
        self.said.append(("dropped", reason))


def feed(assembly: NodeAssembly, log: Log, events: list[Event], offsets: list[int]) -> None:
    for event, offset in zip(events, offsets, strict=True):
        assembly.feed(event, 0, offset, 0, log)


def test_a_restart_keeps_the_span_and_retries_and_the_answer_is_the_latest_attempt() -> None:
    run = RunEvents()
    events = [
        run.request(prompt()),
        run.response("bro", {"id": "r1"}),
        run.retry(1, "stream broke"),
        run.request(prompt()),
        run.response("who", None),
        run.response("le", {"id": "r2"}),
    ]
    assembly, log = NodeAssembly(), Log()
    feed(assembly, log, events, [10, 11, 12, 13, 14, 15])
    assert log.said == [("opened", "MODEL"), ("opened", "MODEL"), ("superseded", "1->2")]
    (node,) = assembly.open_nodes()
    assert (node.text, node.answer, node.raw, node.retries) == ("whole", "whole", {"id": "r2"}, 1)
    assert assembly.lowest_offset(0) == 10 and assembly.lowest_offset(1) is None

    node_events = [run.retry(2, "again"), run.response(None, None)]
    feed(assembly, log, node_events, [16, 17])
    # the seed's outputText runs on over a retry; the latest attempt said nothing of its own
    assert (node.text, node.answer, node.answer_raw, node.answered) == ("whole", None, None, False)
    assert node.raw == {"id": "r2"} and node.retries == 2


def test_events_out_of_offset_order_lower_the_span_and_a_step_end_closes_it() -> None:
    run = RunEvents()
    request, response = run.request(prompt()), run.response("4")
    stray = run.response("no request in its step", step=9)
    end = run.step_end()
    assembly, log = NodeAssembly(), Log()
    feed(assembly, log, [request, response, stray], [5, 3, 6])  # read at offsets out of order
    assert assembly.lowest_offset(0) == 3
    feed(assembly, log, [end], [7])
    assert log.said == [("opened", "MODEL"), ("dropped", "no-open-request"), ("closed", "MODEL")]
    assert assembly.lowest_offset(0) is None and assembly.open_count() == 0
