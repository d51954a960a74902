"""Every secret shape of issue 12.9 is masked by the default redactor; ordinary text is not.

The same catalogue (``tests/secret_shapes.py``) goes through every store in
``tests/test_secrets_stores_e2e.py``; here each shape is checked alone, plus the one-scan
prefilter against the full walk over the new shapes.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtrail.publisher import REDACTED, default_redactor
from runtrail.publisher.redaction import is_sensitive_key, redact_text, redact_value
from runtrail.publisher.secret_keys import SECRET_SUFFIXES
from tests.secret_shapes import Shape, shapes


def form_with(shape: Shape) -> dict[str, Any]:
    data: dict[str, Any] = {"prompt": {"messages": [{"role": "user", "content": "hi"}]}}
    form: dict[str, Any] = {
        "eventId": "e-1",
        "runId": "run-1",
        "tenantId": "acme",
        "type": "MODEL_REQUEST",
        "schemaVersion": 1,
        "correlationId": "run-1",
        "actor": {"kind": "agent", "id": "planner"},
        "data": data,
    }
    if shape.place == "data":
        data["prompt"]["headers"] = shape.value
    elif shape.place == "text":
        data["prompt"]["messages"].append({"role": "user", "content": shape.value})
    else:
        form["correlationId"] = shape.value
        form["actor"] = {"kind": "agent", "id": shape.value}
    return form


@pytest.mark.parametrize("shape", shapes(), ids=lambda s: s.name)
def test_each_shape_is_masked_and_its_neighbour_kept(shape: Shape) -> None:
    out = orjson.dumps(default_redactor(form_with(shape))).decode()
    assert shape.secret not in out
    assert shape.canary in out
    assert REDACTED in out


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("db_password", True),
        ("DB_PASSWORD", True),
        ("dbPassword", True),
        ("PassWord", True),
        ("password_confirmation", True),
        ("aws_secret_access_key", True),
        ("awsSecretAccessKey", True),
        ("private_key", True),
        ("privateKey", True),
        ("Cookie", True),
        ("Set-Cookie", True),
        ("Proxy-Authorization", True),
        ("X-API-Key", True),
        ("XAPIKey", True),
        ("apiKey", True),
        ("x-goog-api-key", True),
        ("github_token", True),
        ("csrftoken", True),
        ("client_secret", True),
        ("basic_auth", True),
        ("credentials", True),
        ("input_tokens", False),
        ("inputTokens", False),
        ("max_tokens", False),
        ("tokenizer", False),
        ("token_count", False),
        ("secretary", False),
        ("passwords_count", False),
        ("idempotencyKey", False),
        ("cache_key", False),
        ("key", False),
        ("keyboard", False),
        ("author", False),
        ("sessionId", False),
    ],
)
def test_key_names(key: str, secret: bool) -> None:
    assert is_sensitive_key(key) is secret


@pytest.mark.parametrize(
    "text",
    [
        "Basic plan costs 10 EUR",
        "the basic idea",
        "max_tokens: 100, inputTokens=5",
        "see https://example.com:8080/a@b and mailto:x@y",
        "https://user@example.com/path",
        "key: value, keyboard=us",
        "author: Ada Lovelace",
        "idempotencyKey=inv-7",
        "Asia/Tokyo",
        "my password is long",  # no separator: prose, not a pair
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    ],
)
def test_ordinary_text_is_kept(text: str) -> None:
    assert redact_text(text) == text


def test_dsn_keeps_user_and_host() -> None:
    assert redact_text("postgresql://app:pw1@db:5432/x") == f"postgresql://app:{REDACTED}@db:5432/x"
    assert redact_text("redis://:pw2@cache") == f"redis://:{REDACTED}@cache"


def test_authorization_keeps_scheme_and_cookie_masks_whole_line() -> None:
    assert redact_text("Authorization: Digest abc, nonce=1\nok") == (
        f"Authorization: Digest {REDACTED}\nok"
    )
    assert redact_text("Cookie: a=1; b=2\nnext") == f"Cookie: {REDACTED}\nnext"


def test_a_label_is_not_taken_for_a_value() -> None:
    assert redact_text("token: password: pw5") == f"token: password: {REDACTED}"


def test_large_text_stays_fast() -> None:
    text = "revenue token: 5 key=value a.b-c summary author basic " * 20000  # ~1 MB
    started = time.perf_counter()
    assert redact_text(text) == text.replace("token: 5", f"token: {REDACTED}")
    assert time.perf_counter() - started < 5  # ~0.1 s here; a regex per position took 1.3 s


def test_json_text_nested_twice() -> None:
    inner = orjson.dumps({"password": "pw3"}).decode()
    outer = orjson.dumps({"body": inner, "n": 1}).decode()
    out = redact_text(outer)
    assert "pw3" not in out
    assert orjson.loads(orjson.loads(out)["body"]) == {"password": REDACTED}


def test_escaped_key_spelling_in_json_text() -> None:
    assert "pw4" not in redact_text('{"p\\u0061ssword": "pw4"}')


def test_unterminated_pem_is_masked_to_the_end() -> None:
    assert redact_text("x -----BEGIN EC PRIVATE KEY-----\nMHcCAQEE") == f"x {REDACTED}"


def test_redaction_is_idempotent() -> None:
    for shape in shapes():
        once = default_redactor(form_with(shape))
        assert default_redactor(once) == once


def test_every_secret_suffix_is_under_a_prefilter_stem() -> None:
    from runtrail.publisher import secret_markers

    covered = {x for xs in secret_markers._SUFFIXES_BY_STEM.values() for x in xs}
    assert set(SECRET_SUFFIXES) - covered <= {"password", "passwd", "passphrase"}
    assert all(m in secret_markers._PLAIN_MARKERS for m in ("passw", "passphrase"))


# --- the one-scan prefilter must never skip a redaction the walk would make ---------------------
_keys = st.sampled_from(
    ["q", "dbPassword", "Set-Cookie", "sessionKey", "inputTokens", "note", "PassWord", "key"]
)
_texts = st.sampled_from(
    [
        "plain",
        "password=x",
        "Cookie: a=b",
        "u postgresql://a:b@c/d",
        "ghp_" + "a" * 30,
        "xoxb-" + "1" * 12,
        "eyJabcde.eyJabcde.x",
        "-----BEGIN PRIVATE KEY-----\nabc",
        '{"token": "t"}',
        '{"p\\u0061ssword": "x"}',
        "Basic dXNlcjpwYXNz",
        "tab\tBasic\tdXNlcjpwYXNz",
        "maxTokens: 3",
    ]
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


@given(key=st.text(alphabet="aAbkKeEyYpPsSwWoOrRdDtTnN_-. ", max_size=14), value=_texts)
def test_prefilter_agrees_on_any_key_spelling(key: str, value: str) -> None:
    data = {key: value}
    assert default_redactor({"data": data})["data"] == redact_value(data)
