"""``runtrail settings`` masks every secret-bearing value of every section (issue 12.10)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runtrail_tools.settings_catalog import masked

SECRETS = {
    "sasl.password": "pw-kafka-1",
    "ssl.key.password": "pw-kafka-2",
    "ssl.keystore.password": "pw-kafka-3",
    "sasl.oauthbearer.client.secret": "pw-kafka-4",
    "sasl.oauthbearer.config": "principal=svc token=pw-kafka-5",
    "ssl.key.pem": "-----BEGIN PRIVATE KEY-----\npw-kafka-6\n-----END PRIVATE KEY-----",
}


def run_settings(env: dict[str, str]) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RUNTRAIL_")}
    done = subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", "settings"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_no_secret_of_any_section_is_printed() -> None:
    options = {"security.protocol": "SASL_SSL", "sasl.username": "svc-user", **SECRETS}
    out = run_settings(
        {
            "RUNTRAIL_KAFKA_OPTIONS": json.dumps(options),
            "RUNTRAIL_AUDIT_STORE_URL": "postgresql://audit:pw-url-1@db.internal:5432/audit",
            "RUNTRAIL_SESSIONS_STORE_URL": "postgresql://sess:pw-url-2@db.internal/s",
            "RUNTRAIL_RESUME_CACHE_STORE_URL": "postgresql://db.internal/c?password=pw-url-3",
            "RUNTRAIL_PROJECTOR_STORE_URL": "postgresql://proj:pw-url-4@db.internal/p",
            "RUNTRAIL_RESUME_CACHE_TOKENS": '{"acme": "pw-token-1"}',
            "RUNTRAIL_SESSIONS_HTTP_TOKENS": "acme=pw-token-2",
            "RUNTRAIL_METRICS_TOKEN": "pw-token-3",
        }
    )
    assert "pw-" not in out, out
    # what is not secret stays readable, so the output is still useful
    for shown in ("SASL_SSL", "svc-user", "sess:", "db.internal", "RUNTRAIL_METRICS_TOKEN"):
        assert shown in out


def test_an_invalid_value_is_reported_without_its_input() -> None:
    out = run_settings({"RUNTRAIL_SESSIONS_HTTP_TOKENS": "pw-token-broken-no-pairs"})
    assert "RUNTRAIL_SESSIONS_*" in out and "<invalid: http_tokens" in out
    assert "pw-token-broken" not in out


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("bootstrap_servers", "b1:9092", "b1:9092"),
        ("store_url", "sqlite:///x.db", "sqlite:///x.db"),
        ("http_tokens", {"acme": "t"}, "***"),
        (
            "kafka_options",
            {"sasl.password": "p", "acks": "all"},
            "{'sasl.password': '***', 'acks': 'all'}",
        ),
        ("store_url", None, "None"),
    ],
)
def test_masked(name: str, value: object, shown: str) -> None:
    assert masked(name, value) == shown
