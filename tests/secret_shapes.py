"""The secret shapes of issue 12.9, each with a unique secret text and a canary beside it.

A shape places its secret somewhere in an event (``data`` by key, inside a string, inside JSON
text, in the envelope). The canary is plain text in the same place that must survive
redaction: finding the canary in a store proves the store holds that field, so *not* finding
the secret there means it was masked, not merely never stored.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from typing import Any


def _tag(n: int) -> str:
    return f"{n:02d}{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class Shape:
    """``secret`` must be found nowhere; ``canary`` must be found wherever the event is stored."""

    name: str
    secret: str
    canary: str
    #: where it goes: "data" (merged into the event's payload dict), "text" (a string placed
    #: in the prompt / arguments / output), or "envelope" (correlationId / actor.id)
    place: str
    value: Any


def shapes() -> list[Shape]:
    """Every shape, with fresh secrets (so two runs never see each other's text)."""
    out: list[Shape] = []

    def add(name: str, place: str, make: Any, secret: str) -> None:
        canary = f"canary{len(out):02d}{uuid.uuid4().hex[:10]}"
        out.append(Shape(name, secret, canary, place, make(secret, canary)))

    s = _tag
    add("db_password key", "data", lambda v, c: {"db_password": v, "dbHost": c}, f"pw{s(1)}")
    add(
        "aws_secret_access_key key",
        "data",
        lambda v, c: {"aws_secret_access_key": v, "region": c},
        f"wJalr{s(2)}EXAMPLEKEY",
    )
    add("private_key key", "data", lambda v, c: {"private_key": v, "kid": c}, f"pk{s(3)}")
    add("Cookie key", "data", lambda v, c: {"Cookie": f"sid={v}", "Accept": c}, f"ck{s(4)}")
    add("api key not sk-", "data", lambda v, c: {"apiKey": v, "vendor": c}, f"AIza{s(5)}")
    add("X-API-Key key", "data", lambda v, c: {"X-API-Key": v, "X-Trace": c}, f"xk{s(6)}")
    add("password key", "data", lambda v, c: {"password": v, "user": c}, f"hunter{s(7)}")
    add("ghp_ token", "text", lambda v, c: f"clone with {v} then {c}", "ghp_" + s(8) * 2)
    add(
        "github_pat_ token",
        "text",
        lambda v, c: f"GH={v} ({c})",
        "github_pat_" + s(9) + "_" + s(9),
    )
    add(
        "DSN password",
        "text",
        lambda v, c: f"connect postgresql://app:{v}@db.internal:5432/{c}",
        f"dsn{s(10)}",
    )
    creds = f"admin:basic{s(11)}"
    add(
        "Basic auth",
        "text",
        lambda v, c: f"Authorization: Basic {v}\nX-Request: {c}",
        base64.b64encode(creds.encode()).decode(),
    )
    body = base64.b64encode(s(12).encode() * 3).decode()
    add(
        "PEM private key",
        "text",
        lambda v, c: f"key file:\n-----BEGIN PRIVATE KEY-----\n{v}\n-----END PRIVATE KEY-----\n{c}",
        body,
    )
    add(
        "JSON inside a string",
        "text",
        lambda v, c: json.dumps({"config": {"db_password": v}, "note": c}),
        f"js{s(13)}",
    )
    add("password in a prompt", "text", lambda v, c: f"password: {v}\n{c}", f"pp{s(14)}")
    add(
        "X-API-Key in a prompt",
        "text",
        lambda v, c: f"headers={{'X-API-Key': '{v}', 'X-Note': '{c}'}}",
        f"xp{s(15)}",
    )
    add("sk-ant key", "text", lambda v, c: f"ANTHROPIC {v} {c}", "sk-ant-api03-" + s(16) * 2)
    add("AWS key id", "text", lambda v, c: f"id {v} {c}", "AKIA" + uuid.uuid4().hex[:16].upper())
    add(
        "JWT",
        "text",
        lambda v, c: f"token was {v} for {c}",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOi" + s(17) + ".sig" + s(17),
    )
    add("Bearer token", "text", lambda v, c: f"curl -H 'Authorization: Bearer {v}' {c}", s(18))
    add("Slack token", "text", lambda v, c: f"slack {v} {c}", "xoxb-" + s(19))
    add("key=value in a URL", "text", lambda v, c: f"GET /v1?api_key={v}&q={c}", f"kv{s(20)}")
    add("secret in correlationId", "envelope", lambda v, c: f"{c} Bearer {v}", s(21))
    return out


def secret_texts(found: list[Shape]) -> list[str]:
    return [shape.secret for shape in found]
