"""The command API over real HTTP: per-tenant tokens, outcomes, refusals with reasons, and the
``runtrail command`` CLI from another process."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from runtrail.commands.client import CommandApiError, CommandClient
from tests.commands_support import StoreBackend, serving_command_api
from tests.commands_support import command_backend as command_backend  # (a fixture)

TOKENS = {"acme": "tok-acme", "globex": "tok-globex"}
DIGEST = "sha256:deploy-prod"


@dataclass
class Api:
    url: str
    store_url: str

    def client(self, tenant: str = "acme") -> CommandClient:
        return CommandClient(self.url, TOKENS[tenant])


@pytest.fixture
def api(command_backend: StoreBackend) -> Iterator[Api]:
    with serving_command_api(command_backend.url, TOKENS) as url:
        yield Api(url, command_backend.url)


def _awaiting_approval(client: CommandClient, run: str) -> None:
    assert client.send(
        run, "accept_run", {"goalRef": "g", "policyVersion": "p1"}, expected_version=0
    ).accepted
    assert client.send(
        run, "require_approval", {"actionDigest": DIGEST, "reason": "deploy"}, expected_version=1
    ).accepted


def test_commands_over_http_accept_refuse_stale_and_replay_duplicates(api: Api) -> None:
    client = api.client()
    _awaiting_approval(client, "run-1")
    shown = client.run("run-1")
    assert shown is not None and shown["status"] == "awaiting_approval" and shown["version"] == 2
    assert "grant_approval" in shown["allowedCommands"]
    granted = client.approve("run-1", DIGEST, "alice", expected_version=2, idempotency_key="g1")
    assert granted.accepted and granted.version == 3
    again = client.approve("run-1", DIGEST, "alice", expected_version=2, idempotency_key="g1")
    assert again.accepted and again.duplicate and again.version == 3
    stale = client.approve("run-1", DIGEST, "bob", expected_version=2)
    assert not stale.accepted and stale.code == "stale" and stale.version == 3
    invalid = client.approve("run-1", DIGEST, "bob", expected_version=3)
    assert invalid.code == "invalid-transition" and "awaiting_approval" in (invalid.reason or "")
    assert [e["sequence"] for e in client.events("run-1")] == ["1", "2", "3"]


def test_cancelled_and_terminal_runs_are_refused_with_a_reason(api: Api) -> None:
    client = api.client()
    _awaiting_approval(client, "run-c")
    assert client.cancel("run-c", "alice", "wrong target").accepted
    refused = client.approve("run-c", DIGEST, "alice")
    assert refused.code == "cancellation-requested"
    assert client.send("run-c", "acknowledge_cancellation", expected_version=3).accepted
    final = client.send("run-c", "fail_run", {"reason": "x"}, expected_version=4)
    assert final.code == "run-terminal" and "cancelled" in (final.reason or "")


def test_tenants_never_mix_and_a_token_is_required(api: Api) -> None:
    _awaiting_approval(api.client("acme"), "run-t")
    other = api.client("globex")
    assert other.run("run-t") is None
    assert other.events("run-t") == []
    # a body naming another tenant is still the token's tenant's command
    status, _ = other._call(
        "POST",
        "/v1/runs/run-t/commands",
        {
            "name": "accept_run",
            "tenantId": "acme",
            "expectedVersion": 0,
            "idempotencyKey": "x",
            "data": {"goalRef": "g", "policyVersion": "p"},
        },
    )
    assert status == 200
    assert other.run("run-t") is not None  # globex's own run-t, opened now
    shown = api.client("acme").run("run-t")
    assert shown is not None and shown["version"] == 2  # acme's run is untouched
    request = urllib.request.Request(f"{api.url}/v1/runs/run-t")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)
    assert caught.value.code == 401
    with pytest.raises(CommandApiError) as bad:
        CommandClient(api.url, "wrong").run("run-t")
    assert bad.value.status == 401


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_operator_cli_approves_and_a_stale_approval_is_refused(api: Api) -> None:
    _awaiting_approval(api.client(), "run-cli")
    flags = ("--url", api.url, "--token", TOKENS["acme"], "--by", "ops")
    done = _cli("command", "approve", "run-cli", *flags)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["version"] == 3
    stale = _cli(
        "command", "approve", "run-cli", *flags, "--expected-version", "2", "--digest", DIGEST
    )
    assert stale.returncode == 1 and "refused (stale)" in stale.stderr
    cancel = _cli("command", "cancel", "run-cli", *flags, "--reason", "done")
    assert cancel.returncode == 0, cancel.stderr
