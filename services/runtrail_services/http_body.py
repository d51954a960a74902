"""A Starlette request's body read up to a limit, for every web endpoint that takes one.

Why not ``await request.body()``: it reads the whole body into memory before anything can
compare its size with a limit, so one client (the explorer's sign-in form takes bodies before
any token) could make the server hold gigabytes. Here at most ``limit`` bytes are held. What
comes past the limit is read and dropped up to ``DRAIN`` times the limit, so a client that sent
a body a little too large reads its 413 (an answer sent while the client is still writing
reaches it as a reset connection); a body declared or sent larger than that is not read on.
"""

from __future__ import annotations

from starlette.requests import Request

from runtrail.whole_numbers import whole_number

#: How many times the limit is read (and dropped) before the rest of a body is left unread.
DRAIN = 16


async def body_within(request: Request, limit: int) -> bytes | None:
    """The request's body, or None when it is larger than ``limit`` bytes."""
    declared = whole_number(request.headers.get("content-length"))
    if declared is not None and declared > limit * DRAIN:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            chunks.clear()  # too large: nothing of it is kept
            if size > limit * DRAIN:
                break
            continue
        chunks.append(chunk)
    return None if size > limit else b"".join(chunks)
