"""The explorer's query parameters and tenant scoping over real HTTP (a real ``runtrail ui``
process on seeded stores, no browser): the run page's ``page``/``step``, ``view.json``'s
``since``, the runs list's time filters and cursors, and every per-run JSON route asked with another
tenant's token.

A number in a form the handler half-checks (``²`` passes ``str.isdigit`` but not ``int``)
must not be a 500; another tenant's run must answer 404 (or nothing of it) on every route.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import pytest

from tests.ui_stores import seed, serving, sign_tree_head, small_run

TOKENS = {"acme": "acme-token", "globex": "globex-token"}


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    root = tmp_path_factory.mktemp("ui-params")
    state = root / "state"
    state.mkdir()
    seed(state, [small_run("a-1", "acme"), small_run("g-1", "globex")])
    sign_tree_head(state)
    with serving(state, TOKENS, root / "ui.log") as url:
        found = urlsplit(url).port
        assert found is not None
        yield found


def call(port: int, path: str, token: str = "acme-token") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, body


SUPERSCRIPT_TWO = quote("²")


@pytest.mark.parametrize(
    "query",
    [f"page={SUPERSCRIPT_TWO}", f"step={SUPERSCRIPT_TWO}", f"step=-{SUPERSCRIPT_TWO}",
     "page=-1", "page=0", "page=abc", f"page={10**30}", f"step={10**30}", "step=-5"],
)  # fmt: skip
def test_a_malformed_page_or_step_still_shows_the_run(port: int, query: str) -> None:
    """``page``/``step`` that are not usable numbers are ignored (as documented), never a 500
    that leaves the user with no run page at all."""
    status, body = call(port, f"/runs/a-1?{query}")
    assert status == 200, (query, status, body[:300])
    assert b"a-1" in body


@pytest.mark.parametrize("since", [SUPERSCRIPT_TWO, "-1", "abc", str(10**30)])
def test_a_malformed_since_of_view_json_is_not_a_500(port: int, since: str) -> None:
    """A followed page's ``since`` that is not a sequence number must not crash the update
    the page polls for (a 500 there freezes the live view)."""
    status, body = call(port, f"/runs/a-1/view.json?since={since}")
    assert status == 200, (since, status, body[:300])
    assert json.loads(body)["events"] >= 1


@pytest.mark.parametrize("path", ["/view.json?since=0", "/links/0", "/export.jsonl"])
def test_another_tenants_run_is_a_404_on_every_json_route(port: int, path: str) -> None:
    """globex's token naming acme's run must get none of it on any of the run's routes
    (acme's own token gets it: the 404 is the tenant check, not a missing run)."""
    assert call(port, f"/runs/a-1{path}")[0] == 200
    status, body = call(port, f"/runs/a-1{path}", token="globex-token")
    assert status == 404, (path, status, body[:300])
    assert b"MODEL_REQUEST" not in body and b"goal://1" not in body


def test_rows_json_lists_only_the_tokens_tenants_runs(port: int) -> None:
    """``/live/rows.json?run=`` naming another tenant's run must not return its row."""
    status, body = call(port, "/live/rows.json?run=a-1&run=g-1", token="globex-token")
    assert status == 200
    assert set(json.loads(body)) == {"g-1"}


@pytest.mark.parametrize("name", ["since", "until"])
def test_a_time_filter_that_is_not_a_time_is_refused_naming_it(port: int, name: str) -> None:
    """``since=yesterday`` was compared as text with the stored times: the list showed no run
    (or every run for ``until``) as if the filter had matched, with no word of the mistake."""
    status, body = call(port, f"/runs?{name}=yesterday")
    assert status == 400, (name, status, body[:300])
    assert name.encode() in body


@pytest.mark.parametrize("cursor", ["after", "before"])
@pytest.mark.parametrize("at", ["abc", SUPERSCRIPT_TWO, str(10**30), "-1"])
def test_a_cursor_that_is_no_position_in_the_order_is_refused_naming_it(
    port: int, cursor: str, at: str
) -> None:
    """A page link by event count whose position is not a count (a hand-edited or truncated
    link) was read with ``int()`` (a 500) or sent past 2^63 to the store (its overflow)."""
    status, body = call(port, f"/runs?sort=events&{cursor}=a-1&at={at}")
    assert status == 400, (cursor, at, status, body[:300])
    assert b"at is not an event count" in body


def test_a_cursor_by_event_count_pages_on(port: int) -> None:
    """The check above refuses no real position: the page after a count lists the runs
    past it."""
    status, body = call(port, "/runs?sort=events&dir=asc&after=a-0&at=0")
    assert status == 200, body[:300]
    assert b"a-1" in body


def test_a_sign_in_form_over_the_limit_is_a_413_and_is_not_read_whole(port: int) -> None:
    """The sign-in form takes bodies before any token: one over 64 KiB is refused by its
    declared length, so no client can make the explorer hold a body of any size."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/login",
        data=b"token=" + b"x" * (65 * 1024),
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            status = answer.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    assert status == 413
