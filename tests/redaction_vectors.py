"""Shared redaction vectors: cases both the Python Publisher's redactor and the ai4j adapter's
Java port run (``tests/redaction_vectors.json``, regenerate with
``python -m tests.redaction_vectors``).

Each value case holds an input and the Python redactor's output when the file was made; each
form case a JSON-form event and its redacted form (or the refusal). The cases are the secret
shapes of issue 12.9 (``tests/secret_shapes.py``, with seeded secrets so the file is stable),
ordinary text that must survive, the edge cases of ``tests/test_redaction_shapes.py``, key
names, and envelope identifiers that refuse the event.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any
from unittest import mock

import orjson

from runtrail.publisher.redaction import SecretInIdentifier, default_redactor, redact_value

PATH = Path(__file__).with_suffix(".json")

TEXTS = (
    "Basic plan costs 10 EUR",
    "the basic idea",
    "max_tokens: 100, inputTokens=5",
    "see https://example.com:8080/a@b and mailto:x@y",
    "https://user@example.com/path",
    "key: value, keyboard=us",
    "author: Ada Lovelace",
    "idempotencyKey=inv-7",
    "Asia/Tokyo",
    "my password is long",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    "postgresql://app:pw1@db:5432/x",
    "redis://:pw2@cache",
    "Authorization: Digest abc, nonce=1\nok",
    "Cookie: a=1; b=2\nnext",
    "token: password: pw5",
    '{"body": "{\\"password\\": \\"pw3\\"}", "n": 1}',
    '{"p\\u0061ssword": "pw4"}',
    "x -----BEGIN EC PRIVATE KEY-----\nMHcCAQEE",
    "sk-learn is a library; sk-" + "a1B2" * 12,
    "Basic dXNlcjpwYXNz and Basic YWJj",
    "headers: {'Authorization': 'Bearer abc.def'}",
    'escaped {\\"api_key\\": \\"k-1\\"} inside',
    "weather in Paris? my api_key=sk-live-0123456789abcdefXYZ",
    "résumé — naïve token=ünïcode ok",
)
KEYS = (
    "api_key", "apikey", "api-key", "x-api-key", "password", "PassWord", "client_secret",
    "awsSecretAccessKey", "Set-Cookie", "Proxy-Authorization", "XAPIKey", "x-goog-api-key",
    "csrftoken", "basic_auth", "credentials", "input_tokens", "inputTokens", "max_tokens",
    "tokenizer", "token_count", "secretary", "passwords_count", "idempotencyKey", "cache_key",
    "key", "keyboard", "author", "sessionId", "password_confirmation",
)  # fmt: skip


def _form(**over: Any) -> dict[str, Any]:
    form: dict[str, Any] = {
        "eventId": "e-1",
        "runId": "run-1",
        "tenantId": "acme",
        "sequence": "1",
        "type": "MODEL_REQUEST",
        "schemaVersion": 1,
        "occurredAt": "2026-12-01T10:00:00.000Z",
        "recordedAt": None,
        "actor": {"kind": "agent", "id": "planner"},
        "causationEventId": None,
        "correlationId": "run-1",
        "sessionId": None,
        "turnId": None,
        "step": 1,
        "data": {"prompt": {"messages": [{"role": "user", "content": "hi"}]}},
    }
    form.update(over)
    return form


def build() -> dict[str, Any]:
    """The cases with the Python redactor's current answers."""
    rng = random.Random(13)
    with mock.patch("uuid.uuid4", lambda: uuid.UUID(int=rng.getrandbits(128), version=4)):
        from tests.secret_shapes import shapes
        from tests.test_redaction_shapes import form_with

        found = shapes()
        shape_forms = [_form(**{k: v for k, v in form_with(s).items()}) for s in found]
    values: list[Any] = [*TEXTS, *({k: "v-1", "n": k} for k in KEYS)]
    values += [s.value for s in found]
    values.append({"password": None, "list": [1, 2.5, True, None, "Bearer abc"]})
    forms = [
        *shape_forms,
        _form(data={"prompt": {"model": "m", "password": None}}),
        _form(runId="run Bearer abcdef123"),
        _form(sessionId="sk-" + "z" * 20),
        _form(correlationId="corr password=pw9"),
    ]
    out_forms: list[Any] = []
    for form in forms:
        try:
            out_forms.append(default_redactor(form))
        except SecretInIdentifier as exc:
            out_forms.append({"refused": str(exc)})
    return {
        "values": [{"in": v, "out": redact_value(v)} for v in values],
        "forms": [{"in": f, "out": o} for f, o in zip(forms, out_forms, strict=True)],
    }


def load() -> dict[str, Any]:
    result: dict[str, Any] = orjson.loads(PATH.read_bytes())
    return result


if __name__ == "__main__":
    PATH.write_bytes(orjson.dumps(build(), option=orjson.OPT_INDENT_2) + b"\n")
    print(f"wrote {PATH}")
