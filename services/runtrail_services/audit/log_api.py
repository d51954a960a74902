"""The audit API: the transparency log over HTTP, read-only and public.

* ``GET /checkpoint``, ``GET /tile/<L>/<N>[.p/<W>]``, ``GET /tile/entries/<N>[.p/<W>]`` —
  the C2SP tlog-tiles objects, as written to the tile store (anyone can mirror them); full
  tiles never change and are served as immutable;
* ``GET /v1/log/inclusion?tenant=T&run=R&index=I[&size=N]`` — the inclusion proof of a run's
  link in the latest signed checkpoint (or the one of size N), with that checkpoint;
* ``GET /v1/log/consistency?old=M[&new=N]`` — the consistency proof between two signed
  checkpoints, with both.

Public because the log holds hashes only: a proof gives a link's hash and place, never an
event. Whoever can name a tenant and run learns whether its link is logged, no more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

import orjson

from runtrail.audit.log_proofs import NoProof, prove_consistency, prove_link
from runtrail.audit.store import LinkStore
from runtrail.audit.tile_store import TileStore
from runtrail.audit.tlog import TILE_WIDTH, LogTree
from runtrail.http_server import BackgroundServer, QuietHandler
from runtrail.whole_numbers import MAX_INT64, whole_number

#: (status, content type, body, cache control)
Response = tuple[int, str, bytes, str]
IMMUTABLE = "public, max-age=31536000, immutable"
NO_CACHE = "no-cache"


def _json(status: int, body: object) -> Response:
    return status, "application/json", orjson.dumps(body), NO_CACHE


class LogApi(BackgroundServer):
    """A threaded HTTP server for one log: its objects from ``tiles``, proofs from ``store``."""

    def __init__(self, store: LinkStore, tiles: TileStore, host: str, port: int) -> None:
        self.store = store
        self.tiles = tiles
        self._tree = LogTree()
        self._tree_lock = threading.Lock()  # the tree grows in place: one request at a time
        super().__init__(host, port, self._handler(), "runtrail-audit-log-api")

    def answer(self, target: str) -> Response:
        parts = urlsplit(target)
        path = parts.path
        if path == "/checkpoint" or path.startswith("/tile/"):
            return self._object(path[1:])
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        try:
            if path == "/v1/log/inclusion":
                return self._prove(
                    lambda tree: prove_link(
                        self.store, tree, query["tenant"], query["run"],
                        _required(query, "index"), _number(query, "size"),
                    )
                )  # fmt: skip
            if path == "/v1/log/consistency":
                return self._prove(
                    lambda tree: prove_consistency(
                        self.store, tree, _required(query, "old"), _number(query, "new")
                    )
                )
        except (KeyError, ValueError) as exc:
            return _json(400, {"error": f"bad query: {exc}"})
        return _json(404, {"error": "not found"})

    def _object(self, path: str) -> Response:
        try:
            data = self.tiles.get(path)
        except ValueError:
            data = None
        if data is None:
            return 404, "text/plain", b"not found\n", NO_CACHE
        if path == "checkpoint":
            return 200, "text/plain; charset=utf-8", data, NO_CACHE
        full = ".p/" not in path and (
            path.startswith("tile/entries/") or len(data) == 32 * TILE_WIDTH
        )
        return 200, "application/octet-stream", data, IMMUTABLE if full else NO_CACHE

    def _prove(self, prove: Callable[[LogTree], dict[str, object]]) -> Response:
        with self._tree_lock:
            try:
                return _json(200, prove(self._tree))
            except NoProof as exc:
                return _json(404, {"error": str(exc)})

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(QuietHandler):
            log_prefix = "audit log API"

            def do_GET(self) -> None:
                status, ctype, body, cache = api.answer(self.path)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", cache)
                self.end_headers()
                self.wfile.write(body)

        return Handler


def _required(query: dict[str, str], name: str) -> int:
    number = _number(query, name)
    if number is None:
        raise ValueError(f"{name} is required")
    return number


def _number(query: dict[str, str], name: str) -> int | None:
    """``name`` as a whole number a store can hold (None: absent); ValueError naming it."""
    text = query.get(name)
    if text is None:
        return None
    number = whole_number(text)
    if number is None:
        raise ValueError(f"{name} must be a whole number from 0 to {MAX_INT64}, not {text!r}")
    return number
