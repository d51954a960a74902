"""The publisher's ledger against a plain model: settlement in any order (acknowledgements,
the drain, the recovery scan, repeats) leaves the first unsettled index and the pending count
exactly as the set of settled indices says, so the spool is never cut past an unsettled event."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.publisher.ledger import Ledger
from tests.examples import examples


@settings(max_examples=examples(500), deadline=None)
@given(
    start=st.integers(0, 1_000),
    taken=st.integers(0, 60),
    data=st.data(),
)
def test_settlement_in_any_order_matches_the_model(
    start: int, taken: int, data: st.DataObject
) -> None:
    ledger = Ledger(start, start)
    indices = [ledger.take() for _ in range(taken)]
    assert indices == list(range(start, start + taken))
    # settle a random selection, in a random order, some twice, some from before the start
    order = data.draw(st.lists(st.integers(start - 5, start + taken - 1), max_size=120))
    settled: set[int] = set()
    for index in order:
        ledger.settle(index)
        if index >= start:
            settled.add(index)
        first = next((i for i in range(start, start + taken) if i not in settled), start + taken)
        assert ledger.first_unsettled == first  # the spool may be cut before it, never past
        assert ledger.pending == taken - len(settled)
        for i in range(start - 5, start + taken):
            assert ledger.is_settled(i) == (i < start or i in settled)
    assert ledger.next_index == start + taken


def test_a_ledger_never_starts_with_its_next_index_before_its_first_unsettled() -> None:
    with pytest.raises(ValueError, match="before the first unsettled"):
        Ledger(10, 9)
