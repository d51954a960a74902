"""The resume protocol on a command store: trusted snapshot plus tail, reconcile hooks,
re-established waits and timers, only allowed commands; finished runs never resume."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from runtrail.commands import EventStore
from runtrail.commands.resume import (
    WHILE_UNRESOLVED,
    OpenInvocation,
    Reconciled,
    ResumeRefused,
    rebuild,
    resume_run,
)
from tests.commands_support import StoreBackend, accept, command
from tests.commands_support import command_backend as command_backend  # (a fixture)


def _intent(store: EventStore, run: str, version: int, invocation: str, tool: str) -> int:
    data = {"invocationId": invocation, "toolName": tool, "idempotencyKey": f"idem-{invocation}"}
    outcome = store.execute(command("record_tool_intent", run, version, data))
    assert outcome.accepted, outcome.reason
    return outcome.version


def _executing(store: EventStore, run: str) -> int:
    store.execute(accept(run))
    store.execute(command("propose_plan", run, 1, {"planArtifactId": "plan-1"}))
    outcome = store.execute(command("validate_plan", run, 2, {"planArtifactId": "plan-1"}))
    assert outcome.accepted and outcome.version == 3
    return outcome.version


def _budget(store: EventStore, run: str, version: int) -> int:
    data = {"budgetId": "b", "amount": 1.0, "unit": "usd"}
    outcome = store.execute(command("reserve_budget", run, version, data))
    assert outcome.accepted
    return outcome.version


def test_resume_replays_the_tail_after_the_trusted_snapshot(command_backend: StoreBackend) -> None:
    store = command_backend.open(snapshot_every=3)
    version = store.execute(accept("run-1")).version
    for _ in range(6):
        version = _budget(store, "run-1", version)
    report = resume_run(store, "acme", "run-1")
    assert report.snapshot_sequence == 6 and report.replayed == 1 and report.version == 7
    assert report.snapshot_refused is None
    assert report.status == "received" and "reserve_budget" in report.allowed_commands


def test_an_edited_snapshot_is_refused_and_the_run_rebuilt_from_zero(
    command_backend: StoreBackend,
) -> None:
    store = command_backend.open(snapshot_every=2)
    version = store.execute(accept("run-1")).version
    for _ in range(3):
        version = _budget(store, "run-1", version)
    sealed = store.db.query("SELECT sealed FROM agent_run_snapshot")[0][0]
    edited = sealed.replace('"reserved":3', '"reserved":30')
    assert edited != sealed
    mark = "%s" if command_backend.dialect == "postgresql" else "?"
    with store.db.transaction() as cur:
        cur.execute(f"UPDATE agent_run_snapshot SET sealed = {mark}", (edited,))
    report = resume_run(store, "acme", "run-1")
    assert report.snapshot_sequence is None and "digest mismatch" in (report.snapshot_refused or "")
    assert report.replayed == 4 and report.version == 4


def test_unknown_outcomes_are_reconciled_through_each_tools_hook(
    command_backend: StoreBackend,
) -> None:
    store = command_backend.open()
    version = _executing(store, "run-1")
    version = _intent(store, "run-1", version, "inv-deploy", "deploy")
    version = _intent(store, "run-1", version, "inv-mail", "send_email")
    asked: list[OpenInvocation] = []

    def deploy_status(open_: OpenInvocation) -> Reconciled | None:
        asked.append(open_)
        return Reconciled("succeeded", result_digest="sha256:released")

    report = resume_run(store, "acme", "run-1", reconcilers={"deploy": deploy_status})
    assert [a.invocation_id for a in asked] == ["inv-deploy"]
    assert asked[0].idempotency_key == "idem-inv-deploy"
    assert report.reconciled == [
        {"invocationId": "inv-deploy", "toolName": "deploy", "outcome": "succeeded"}
    ]
    assert report.unresolved == [
        {"invocationId": "inv-mail", "toolName": "send_email", "reason": "no reconcile hook"}
    ]
    assert report.status == "reconciling"
    assert set(report.allowed_commands) <= WHILE_UNRESOLVED
    assert "record_tool_outcome" in report.allowed_commands
    types = [e.type for e in store.events("acme", "run-1")]
    assert types[-2:] == ["tool.invocation_succeeded", "tool.invocation_uncertain"]
    # resuming again records nothing new and asks the resolved tool nothing
    again = resume_run(store, "acme", "run-1", reconcilers={"deploy": deploy_status})
    assert again.version == report.version and len(asked) == 1
    # the mail system answers later: the uncertain outcome is resolved
    later = resume_run(
        store,
        "acme",
        "run-1",
        reconcilers={"send_email": lambda o: Reconciled("failed", error="bounced")},
    )
    assert later.unresolved == [] and later.status == "executing"


def test_pending_approval_and_its_expiry_timer_are_re_established(
    command_backend: StoreBackend,
) -> None:
    store = command_backend.open()
    store.execute(accept("run-1"))
    expires = "2030-01-01T00:00:00Z"
    data = {"actionDigest": "sha256:d", "reason": "deploy", "expiresAt": expires}
    assert store.execute(command("require_approval", "run-1", 1, data)).accepted
    before = resume_run(store, "acme", "run-1", now=datetime(2029, 12, 31, tzinfo=UTC))
    assert before.pending_approval == {
        "actionDigest": "sha256:d",
        "expiresAt": expires,
        "expired": False,
    }
    assert before.timers == [{"kind": "approval-expiry", "at": expires, "expired": False}]
    assert "grant_approval" in before.allowed_commands
    after = resume_run(
        store, "acme", "run-1", now=datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=1)
    )
    assert after.pending_approval is not None and after.pending_approval["expired"]
    assert "grant_approval" not in after.allowed_commands
    assert "deny_approval" in after.allowed_commands


def test_pending_input_is_re_established(command_backend: StoreBackend) -> None:
    store = command_backend.open()
    store.execute(accept("run-1"))
    assert store.execute(command("require_input", "run-1", 1, {"requestId": "q-1"})).accepted
    report = resume_run(store, "acme", "run-1")
    assert report.pending_input == {"requestId": "q-1"} and report.status == "awaiting_input"
    assert "provide_input" in report.allowed_commands
    assert "validate_plan" not in report.allowed_commands


def test_cancelled_and_terminal_runs_cannot_resume(command_backend: StoreBackend) -> None:
    store = command_backend.open()
    store.execute(accept("run-c"))
    store.execute(command("request_cancellation", "run-c", 1))
    store.execute(command("acknowledge_cancellation", "run-c", 2))
    with pytest.raises(ResumeRefused) as cancelled:
        resume_run(store, "acme", "run-c")
    assert cancelled.value.code == "run-cancelled"
    store.execute(accept("run-s"))
    store.execute(command("complete_run", "run-s", 1))
    with pytest.raises(ResumeRefused) as done:
        resume_run(store, "acme", "run-s")
    assert done.value.code == "run-terminal"
    with pytest.raises(ResumeRefused) as missing:
        resume_run(store, "acme", "no-such-run")
    assert missing.value.code == "not-found"
    assert rebuild(store, "acme", "run-s").state == store.load("acme", "run-s")[1]


def test_runtrail_resume_cli(command_backend: StoreBackend) -> None:
    store = command_backend.open()
    store.execute(accept("run-1"))
    store.execute(accept("run-2"))
    store.execute(command("fail_run", "run-2", 1, {"reason": "boom"}))

    def cli(run: str) -> subprocess.CompletedProcess[str]:
        argv = ["resume", run, "--store", command_backend.url, "--tenant", "acme"]
        return subprocess.run(
            [sys.executable, "-m", "runtrail_tools.cli.main", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    ok = cli("run-1")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["status"] == "received"
    refused = cli("run-2")
    assert refused.returncode == 1 and "refused (run-terminal)" in refused.stderr
