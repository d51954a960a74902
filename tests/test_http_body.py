"""The web endpoints read a body only up to their limit (``runtrail_services.http_body``): a
client cannot make the command API or the explorer hold, or read on through, a body of any
size. Fed a body far larger than the limit, the reader keeps nothing of it and stops reading
at ``DRAIN`` times the limit; a declared length past that is not read at all."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request

from runtrail_services.http_body import DRAIN, body_within

LIMIT = 1000
CHUNK = 100


def _request(chunks: int, declared: int | None) -> tuple[Request, list[int]]:
    read = [0]

    async def receive() -> dict[str, Any]:
        read[0] += 1
        more = read[0] < chunks
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": more}

    headers = [] if declared is None else [(b"content-length", str(declared).encode())]
    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers}
    return Request(scope, receive), read


@pytest.mark.parametrize("declared", [None, LIMIT * DRAIN])
def test_a_body_far_over_the_limit_is_refused_and_read_only_so_far(declared: int | None) -> None:
    request, read = _request(10**6, declared)
    assert asyncio.run(body_within(request, LIMIT)) is None
    assert read[0] * CHUNK <= LIMIT * DRAIN + CHUNK  # stopped at the drain bound


def test_a_declared_length_past_the_drain_bound_is_not_read() -> None:
    request, read = _request(10**6, LIMIT * DRAIN + 1)
    assert asyncio.run(body_within(request, LIMIT)) is None
    assert read[0] == 0


def test_a_body_within_the_limit_is_read_whole() -> None:
    request, _ = _request(10, 10 * CHUNK)
    assert asyncio.run(body_within(request, LIMIT)) == b"x" * 1000
    request, _ = _request(11, None)
    assert asyncio.run(body_within(request, LIMIT)) is None
