"""default_redactor: secret keys and secret-looking strings inside ``data``, nothing else."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtrail.publisher import REDACTED, default_redactor, no_redaction
from runtrail.publisher.redaction import (
    SecretInIdentifier,
    is_sensitive_key,
    redact_text,
    redact_value,
)

SECRET_KEYS = [
    "api_key",
    "apikey",
    "api-key",
    "x-api-key",
    "password",
    "passwd",
    "secret",
    "client_secret",
    "access_token",
    "refresh_token",
    "token",
    "authorization",
]


def event(data: Any) -> dict[str, Any]:
    return {
        "eventId": "e-1",
        "runId": "run-1",
        "tenantId": "t1",
        "correlationId": "corr",
        "type": "TOOL_CALL",
        "schemaVersion": 1,
        "data": data,
    }


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_each_secret_key_is_redacted(key: str) -> None:
    out = default_redactor(event({key: "hunter2", "city": "Paris"}))
    assert out["data"] == {key: REDACTED, "city": "Paris"}


@pytest.mark.parametrize("key", ["API_KEY", "Api-Key", "X-API-KEY", "Authorization", "PassWord"])
def test_keys_match_case_insensitively(key: str) -> None:
    assert default_redactor(event({key: "v"}))["data"] == {key: REDACTED}


@pytest.mark.parametrize("key", ["input_tokens", "tokenizer", "secretary", "passwords_count"])
def test_similar_keys_are_kept(key: str) -> None:
    assert not is_sensitive_key(key)
    assert default_redactor(event({key: 12}))["data"] == {key: 12}


def test_whole_value_of_secret_key_is_replaced_even_if_structured() -> None:
    out = default_redactor(event({"secret": {"nested": [1, 2]}, "token": 123}))
    assert out["data"] == {"secret": REDACTED, "token": REDACTED}


def test_nested_dicts_and_lists() -> None:
    data = {
        "request": {
            "headers": [{"Authorization": "Basic dXNlcjpwYXNz"}, {"Accept": "json"}],
            "body": {"messages": [{"content": "my password is x", "password": "x"}]},
        }
    }
    out = default_redactor(event(data))
    headers = out["data"]["request"]["headers"]
    assert headers == [{"Authorization": REDACTED}, {"Accept": "json"}]
    message = out["data"]["request"]["body"]["messages"][0]
    assert message == {"content": "my password is x", "password": REDACTED}


def test_bearer_tokens_in_strings() -> None:
    text = "curl -H 'Authorization: Bearer abc.DEF-123_x~+/=' https://x and bearer zzz9"
    assert redact_text(text) == (
        "curl -H 'Authorization: Bearer [REDACTED]' https://x and bearer [REDACTED]"
    )


@pytest.mark.parametrize(
    "key",
    [
        "sk-" + "a1B2" * 12,
        "sk-proj-" + "Xy9_" * 10,
        "sk-ant-api03-" + "Zq7-" * 20,
    ],
)
def test_openai_and_anthropic_keys_in_strings(key: str) -> None:
    assert redact_text(f"use {key} now") == f"use {REDACTED} now"
    assert redact_text(f'{{"k":"{key}"}}') == f'{{"k":"{REDACTED}"}}'


def test_aws_access_key_ids_in_strings() -> None:
    assert redact_text("id=AKIAIOSFODNN7EXAMPLE;") == f"id={REDACTED};"
    assert redact_text("AKIAIOSFODNN7EXAMPL") == "AKIAIOSFODNN7EXAMPL"  # 15 chars: no key


@pytest.mark.parametrize(
    "text",
    ["risk-assessment-for-the-quarter-2024", "sk-learn", "task-0123456789abcdefghij", "Bearer"],
)
def test_ordinary_text_is_kept(text: str) -> None:
    assert redact_text(text) == text


def test_strings_are_redacted_everywhere_in_data_and_envelope_free_text() -> None:
    key = "sk-" + "k" * 30
    form = event({"arguments": ["x", {"note": f"key {key}"}], "n": 1, "ok": True, "z": None})
    form["correlationId"] = "Bearer abcdef"
    form["actor"] = {"kind": "agent", "id": f"bot {key}"}
    out = default_redactor(form)
    assert out["data"] == {
        "arguments": ["x", {"note": f"key {REDACTED}"}],
        "n": 1,
        "ok": True,
        "z": None,
    }
    assert out["correlationId"] == f"Bearer {REDACTED}"
    assert out["actor"] == {"kind": "agent", "id": f"bot {REDACTED}"}
    assert out["runId"] == "run-1" and out["eventId"] == "e-1"


@pytest.mark.parametrize("field", ["eventId", "runId", "tenantId", "sessionId", "turnId"])
def test_a_secret_shaped_identifier_refuses_the_event(field: str) -> None:
    form = event({"n": 1})
    form[field] = "sk-" + "k" * 30
    with pytest.raises(SecretInIdentifier, match=field):
        default_redactor(form)


def test_input_is_not_mutated() -> None:
    form = event({"token": "t", "list": [{"api_key": "k", "s": "Bearer abc"}], "d": {"x": 1}})
    before = copy.deepcopy(form)
    out = default_redactor(form)
    assert form == before
    assert out is not form
    assert out["data"]["list"][0] == {"api_key": REDACTED, "s": f"Bearer {REDACTED}"}


def test_form_without_data_and_identity_redactor() -> None:
    form = {"eventId": "e"}
    assert default_redactor(form) == {"eventId": "e"}
    assert no_redaction(event({"token": "t"}))["data"] == {"token": "t"}


def test_redact_value_passes_scalars() -> None:
    assert redact_value(3.5) == 3.5
    assert redact_value(None) is None
    assert redact_value(("a", "sk-" + "b" * 20)) == ["a", REDACTED]


# --- the one-scan prefilter must never skip a redaction the walk would make ---------------------
_keys = st.sampled_from(["q", "Api-Key", "TOKEN", "x_api_key", "note", "authorization", "passwd"])
_texts = st.sampled_from(
    ["plain", "Bearer abc.def", "key sk-" + "a" * 20, "AKIA" + "B" * 16, "tab\tBearer\tx", "é ü"]
)
_json = st.recursive(
    st.none() | st.integers() | _texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=10,
)


@given(data=_json)
def test_prefilter_agrees_with_the_full_walk(data: object) -> None:
    form = {"eventId": "e", "data": data}
    assert default_redactor(form)["data"] == redact_value(data)


def test_a_github_fine_grained_token_is_masked_in_a_text_without_gh_elsewhere() -> None:
    """The prefilter once looked for GitHub markers only behind a "gh" test, which
    ``github_pat_`` fails: such a token in an event with no other "gh" went out unmasked."""
    token = "github_pat_11ABCDEF00123456789_abcdefjklmnopqrstuvwxyz0123456789ABCDEFJKLMNOPQRSTUVW"
    assert "gh" not in token.lower()
    form = {"type": "MODEL_RESPONSE", "runId": "r", "data": {"message": f"use {token} here"}}
    assert token not in str(default_redactor(form))
    assert token not in redact_text(f"use {token} here")
