"""The ai4j adapter masks secrets with the Python Publisher's rules (shared vectors).

``tests/redaction_vectors.json`` holds inputs with the Python redactor's answers; both the
Python redactor (so the file cannot go stale silently) and the Java port in
``adapters/ai4j`` (``Redactor``) must give exactly those answers.
"""

from __future__ import annotations

from typing import Any

import orjson

from runtrail.publisher.redaction import SecretInIdentifier, default_redactor, redact_value
from tests import redaction_vectors
from tests.ai4j_adapter import adapter

VECTORS = redaction_vectors.load()


def test_the_vectors_are_the_python_redactors_answers() -> None:
    assert [redact_value(c["in"]) for c in VECTORS["values"]] == [
        c["out"] for c in VECTORS["values"]
    ]
    for case in VECTORS["forms"]:
        try:
            got: Any = default_redactor(case["in"])
        except SecretInIdentifier as exc:
            got = {"refused": str(exc)}
        assert got == case["out"]


def test_the_vectors_are_not_vacuous() -> None:
    changed = [c for c in VECTORS["values"] if c["in"] != c["out"]]
    kept = [c for c in VECTORS["values"] if c["in"] == c["out"]]
    refused = [c for c in VECTORS["forms"] if "refused" in c["out"]]
    assert len(changed) > 40 and len(kept) > 20 and len(refused) == 2


def test_java_gives_the_python_answers() -> None:
    java = adapter().run(
        "redact",
        stdin={
            "values": [c["in"] for c in VECTORS["values"]],
            "forms": [c["in"] for c in VECTORS["forms"]],
        },
    )
    wrong = [
        (c["in"], j)
        for c, j in zip(VECTORS["values"], java["values"], strict=True)
        if _norm(j) != _norm(c["out"])
    ]
    assert wrong == []
    wrong_forms = [
        (c["in"], j)
        for c, j in zip(VECTORS["forms"], java["forms"], strict=True)
        if _norm(j) != _norm(c["out"])
    ]
    assert wrong_forms == []


def _norm(value: Any) -> Any:
    """Compare JSON text inside strings as JSON: the two sides' serializers may space it alike
    but are not bound to (the masked values are what must agree)."""
    if isinstance(value, str) and value.lstrip().startswith(("{", "[")):
        try:
            return ("json", _norm(orjson.loads(value)))
        except orjson.JSONDecodeError:
            return value
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value
