"""A local OpenAI-compatible chat-completions server that the real instrumentation libraries talk to.

Why: the conventions tests run the instrumentation libraries users run (OpenInference, OpenLLMetry,
the OTel GenAI instrumentation) unchanged, so the model behind them must speak the OpenAI wire
format, streamed and not, with tool calls and usage. The answers are scripted and deterministic,
and every request and response is kept in :attr:`FakeOpenAI.exchanges`: that is what the agent
did, to compare with what runtrail recorded.

The script: a request whose last message is a tool result is answered with text built from that
result; a request that offers tools is answered with one call of the first tool (arguments
``{"city": "Oslo"}``); any other request is answered with text.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-gpt"
TOOL_ARGUMENTS = {"city": "Oslo"}


@dataclass
class Exchange:
    """One chat completion: what the client sent and what the server answered."""

    request: dict[str, Any]
    #: the assistant message answered (role, content, tool_calls), as a non-streamed body says it
    message: dict[str, Any]
    finish_reason: str
    usage: dict[str, int]
    response_id: str
    stream: bool


@dataclass
class FakeOpenAI:
    """The server, started on 127.0.0.1 on a free port; ``base_url`` goes to the client."""

    exchanges: list[Exchange] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self.send_error(404, f"no route {self.path}")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                exchange = fake._answer(request)
                if exchange.stream:
                    self._stream(exchange, request)
                else:
                    body = json.dumps(_completion(exchange)).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def _stream(self, exchange: Exchange, request: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
                for chunk in _chunks(exchange, include_usage):
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _answer(self, request: dict[str, Any]) -> Exchange:
        messages = request.get("messages") or []
        last = messages[-1] if messages else {}
        tools = request.get("tools") or []
        with self._lock:
            number = len(self.exchanges) + 1
            response_id = f"chatcmpl-fake-{number}"
            if last.get("role") == "tool":
                message = {"role": "assistant", "content": f"The tool said: {last.get('content')}"}
                finish = "stop"
            elif tools:
                name = tools[0].get("function", {}).get("name", "tool")
                call = {
                    "id": f"call_fake_{number}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(TOOL_ARGUMENTS)},
                }
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
                finish = "tool_calls"
            else:
                message = {"role": "assistant", "content": f"Answer number {number}."}
                finish = "stop"
            prompt_tokens = 10 + sum(len(str(m.get("content") or "")) for m in messages) // 4
            completion_tokens = 5 + number
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
            exchange = Exchange(
                request, message, finish, usage, response_id, bool(request.get("stream"))
            )
            self.exchanges.append(exchange)
            return exchange


def _completion(exchange: Exchange) -> dict[str, Any]:
    return {
        "id": exchange.response_id,
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": exchange.message,
                "finish_reason": exchange.finish_reason,
                "logprobs": None,
            }
        ],
        "usage": exchange.usage,
    }


def _chunks(exchange: Exchange, include_usage: bool) -> list[dict[str, Any]]:
    """The streamed form: role, then content in two pieces or the tool call, then the finish."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": exchange.response_id,
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    message = exchange.message
    out = [chunk({"role": "assistant", "content": ""})]
    content = message.get("content")
    if content:
        half = len(content) // 2
        out += [chunk({"content": content[:half]}), chunk({"content": content[half:]})]
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}))
    out.append(chunk({}, exchange.finish_reason))
    if include_usage:
        final = chunk({})
        final["choices"] = []
        final["usage"] = exchange.usage
        out.append(final)
    return out
