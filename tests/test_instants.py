"""Every reader of an ISO-8601 time reads it one way (``runtrail.instants``): a time without a
zone is UTC, never the local time of the machine reading it, and text that is no time is None
for the caller to name, not a ``ValueError`` from deep inside."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from runtrail.instants import utc_epoch_ms, utc_instant
from runtrail_tools.ui.pruned import _started_ms

NEW_YEAR = datetime(2026, 1, 1, tzinfo=UTC)
NEW_YEAR_MS = 1767225600000


@pytest.fixture
def far_from_utc() -> Iterator[None]:
    """The reading machine's local zone is nine hours from UTC."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00",
        "2026-01-01T00:00:00.000000Z",
        "2026-01-01T09:00:00+09:00",
        "2025-12-31T19:00:00-05:00",
    ],
)
def test_each_form_names_the_same_instant(far_from_utc: None, text: str) -> None:
    assert utc_instant(text) == NEW_YEAR
    assert utc_epoch_ms(text) == NEW_YEAR_MS


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01", "1767225600000", "²"])
def test_text_that_is_no_time_is_none(text: str) -> None:
    assert utc_instant(text) is None
    assert utc_epoch_ms(text) is None


def test_a_run_started_at_a_time_without_a_zone_is_read_as_utc(far_from_utc: None) -> None:
    """The prune panel read ``startedAt`` without a zone as the explorer machine's local time
    (nine hours off here), so a run could be shown as touched by a pass it was not."""
    assert _started_ms({"projection": {"startedAt": "2026-01-01T00:00:00"}}) == NEW_YEAR_MS
    assert _started_ms({"projection": {"startedAt": "not a time"}}) == 0
