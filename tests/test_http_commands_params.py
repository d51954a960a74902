"""The command API's parameters over real HTTP, at the edges a user can reach by mistake:
``after`` on ``GET /v1/runs/{run}/events`` and ``expectedVersion`` in a command's body, out of
range or not numbers, and every run route asked with another tenant's token.

An out-of-range value must answer a 4xx naming the parameter, never a 500 (which a client
retries and an operator chases as an outage) nor a silently empty answer.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from runtrail.persistence.urls import sqlite_url
from runtrail.whole_numbers import MAX_INT64
from tests.commands_support import serving_command_api

TOKENS = {"acme": "tok-acme", "globex": "tok-globex"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[str]:
    with serving_command_api(sqlite_url(tmp_path / "commands.db"), TOKENS) as url:
        yield url


def call(
    url: str, path: str, body: Any = None, *, token: str = "tok-acme"
) -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path,
        data=data,
        method="GET" if body is None else "POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            return exc.code, json.loads(text)
        except ValueError:
            return exc.code, {"raw": text.decode(errors="replace")}


def accept(url: str, run: str, key: str = "k-accept") -> None:
    status, outcome = call(
        url,
        f"/v1/runs/{run}/commands",
        {
            "name": "accept_run",
            "expectedVersion": 0,
            "idempotencyKey": key,
            "data": {"goalRef": "g", "policyVersion": "p"},
        },
    )
    assert status == 200 and outcome["accepted"], outcome


@pytest.mark.parametrize("after", ["-1", "abc", "1.5", "", "0x10", quote("²")])
def test_events_after_that_is_not_a_sequence_number_is_a_400_naming_it(
    api: str, after: str
) -> None:
    """A negative, fractional or non-ASCII ``after`` (``²`` passes ``str.isdigit``) must be
    refused naming ``after``; otherwise the user gets a 500 or every event from 0."""
    accept(api, "run-1")
    status, body = call(api, f"/v1/runs/run-1/events?after={after}")
    assert status == 400, (after, status, body)
    assert "after" in body["reason"]


def test_events_after_beyond_any_sequence_is_a_400_not_a_500(api: str) -> None:
    """An ``after`` past the store's 64-bit sequences crashed the query (OverflowError: 500)
    instead of telling the user the number is out of range."""
    accept(api, "run-1")
    status, body = call(api, f"/v1/runs/run-1/events?after={MAX_INT64 + 1}")
    assert status == 400, (status, body)
    assert "after" in body["reason"]
    status, body = call(api, f"/v1/runs/run-1/events?after={MAX_INT64}")
    assert status == 200 and body == {"events": []}


def test_events_after_zero_and_n_pages_the_events_exactly(api: str) -> None:
    """``after=N`` must return exactly the events of sequence > N, none dropped or repeated."""
    accept(api, "run-1")
    _, every = call(api, "/v1/runs/run-1/events")
    _, zero = call(api, "/v1/runs/run-1/events?after=0")
    assert every == zero and len(every["events"]) >= 1
    sequences = [int(e["sequence"]) for e in every["events"]]
    _, rest = call(api, f"/v1/runs/run-1/events?after={sequences[0]}")
    assert [int(e["sequence"]) for e in rest["events"]] == sequences[1:]


@pytest.mark.parametrize("version", [-1, MAX_INT64 + 1, 1.5, None, "one"])
def test_expected_version_out_of_range_is_a_400_naming_it(api: str, version: Any) -> None:
    """An ``expectedVersion`` past 64 bits crashed the store (a 500, and the command's
    outcome unknown to the client); any out-of-range or mistyped one must be a 400 naming it."""
    accept(api, "run-1")
    status, body = call(
        api,
        "/v1/runs/run-1/commands",
        {"name": "start_step", "expectedVersion": version, "idempotencyKey": "k-v", "data": {}},
    )
    assert status == 400, (version, status, body)
    assert "expectedVersion" in body["reason"]


def test_a_command_body_over_the_limit_is_a_413_and_changes_nothing(api: str) -> None:
    """An oversized body must be refused as such, not half-read into a command."""
    accept(api, "run-1")
    huge = {
        "name": "start_step",
        "expectedVersion": 1,
        "idempotencyKey": "k-big",
        "data": {"blob": "x" * (1024 * 1024)},
    }
    status, body = call(api, "/v1/runs/run-1/commands", huge)
    assert status == 413 and body["code"] == "too-large"
    _, shown = call(api, "/v1/runs/run-1")
    assert shown["version"] == 1


def test_a_body_sent_in_chunks_is_read_only_up_to_the_limit(api: str) -> None:
    """A body without a Content-Length (chunked) is refused once it passes the limit: the
    server stops reading there instead of holding whatever the client keeps sending."""
    import http.client

    host, port = api.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    chunk = b"x" * (256 * 1024)
    sent = 0
    try:
        connection.putrequest("POST", "/v1/runs/run-1/commands")
        connection.putheader("Authorization", f"Bearer {TOKENS['acme']}")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Transfer-Encoding", "chunked")
        connection.endheaders()
        try:
            for _ in range(64):  # 16 MiB offered, 1 MiB allowed
                connection.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            connection.send(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and closed while the client was still sending
        response = connection.getresponse()
        assert response.status == 413, response.read()[:200]
        assert json.loads(response.read())["code"] == "too-large"
    finally:
        connection.close()


def test_every_run_route_refuses_another_tenants_run(api: str) -> None:
    """globex's token naming acme's run must see nothing of it and change nothing of it."""
    accept(api, "run-a")
    _, events = call(api, "/v1/runs/run-a/events")
    assert events["events"], "acme sees its own events"
    status, _ = call(api, "/v1/runs/run-a", token="tok-globex")
    assert status == 404
    status, body = call(api, "/v1/runs/run-a/events?after=0", token="tok-globex")
    assert status == 200 and body == {"events": []}
    status, body = call(api, "/v1/runs/run-a/resume", {}, token="tok-globex")
    assert status == 422 and body["code"] == "not-found", body
    _, shown = call(api, "/v1/runs/run-a")
    assert shown["version"] == 1 and shown["tenantId"] == "acme"
