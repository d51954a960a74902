"""The demo's "deploy" run, write side: its approval goes through the command API, granted
from a second process, and a second operator's approval of the same observed version is
refused as stale.

The agent (this process) drives the run with commands: accept, plan, a search (intent and
outcome), then it requires an approval for the deploy action and waits. Two operators, each a
``runtrail command approve`` process, observed the same version: the first is accepted, the
second refused (``stale``, with the current version). The agent sees the run back in
``executing``, records the deploy (intent, outcome) and completes. The command store's outbox
relay puts every event on the events topic, where every service sees them.

Why a run of its own: a run has one sequence authority. The scripted demo's runs are numbered
by their publisher; this run is numbered by the command store, so it is driven by commands
from its first event to its last.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtrail.commands.client import CommandClient

DEPLOY = {"tool": "deploy", "arguments": {"service": "billing", "version": "1.4.2"}}
AGENT = {"kind": "agent", "id": "demo-agent"}


@dataclass
class ApprovalDemo:
    """What happened: each operator's exit status and output, and the run's final state."""

    run_id: str
    action_digest: str
    operators: list[dict[str, Any]] = field(default_factory=list)
    final_status: str | None = None
    version: int = 0

    def verdicts(self) -> list[str]:
        """Per operator, what the command API answered (``by: accepted at version N`` or
        ``by: refused (code), current version N``)."""
        return [verdict(op) for op in self.operators]


def verdict(op: dict[str, Any]) -> str:
    """One operator's outcome, from the JSON ``runtrail command approve`` printed."""
    try:
        answer = json.loads(op["stdout"])
    except ValueError:
        lines = op["stderr"].strip().splitlines()
        return f"{op['by']}: no answer (exit {op['exit']}: {lines[-1] if lines else ''})"
    if answer.get("accepted"):
        return f"{op['by']}: accepted at version {answer['version']}"
    return f"{op['by']}: refused ({answer['code']}), current version {answer['version']}"


def action_digest() -> str:
    text = json.dumps(DEPLOY, sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(text).hexdigest()


def operator_approves(url: str, token: str, run_id: str, by: str, version: int) -> dict[str, Any]:
    """One operator, a process of its own: ``runtrail command approve`` at ``version``."""
    done = subprocess.run(
        [
            sys.executable, "-m", "runtrail_tools.cli.main", "command", "approve", run_id,
            "--url", url, "--token", token, "--by", by,
            "--expected-version", str(version), "--digest", action_digest(),
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return {"by": by, "exit": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def run_deploy(
    client: CommandClient,
    run_id: str,
    approvers: Callable[[int], list[dict[str, Any]]],
    *,
    say: Callable[[str], None] = print,
    wait_s: float = 30.0,
    execute: Callable[[str, dict[str, Any]], None] | None = None,
) -> ApprovalDemo:
    """Drive the deploy run; ``approvers(version)`` runs the operators (second processes).
    ``execute(invocation_id, DEPLOY)``, if given, performs the deploy itself, between its
    intent and its outcome, and only once the approval is in."""
    digest = action_digest()
    report = ApprovalDemo(run_id, digest)
    version = 0

    def send(name: str, data: dict[str, Any]) -> None:
        nonlocal version
        outcome = client.send(run_id, name, data, expected_version=version, actor=AGENT)
        if not outcome.accepted:
            raise RuntimeError(f"{name} refused ({outcome.code}): {outcome.reason}")
        version = outcome.version

    plan = f"plan-{run_id}"
    send("accept_run", {"goalRef": "goal:deploy", "policyVersion": "v1"})
    send("propose_plan", {"planArtifactId": plan})
    send("validate_plan", {"planArtifactId": plan})
    send("record_tool_intent", {"invocationId": f"{run_id}-search", "toolName": "search"})
    send("record_tool_outcome", {"invocationId": f"{run_id}-search", "outcome": "succeeded"})
    send("require_approval", {"actionDigest": digest, "reason": "deploy changes production"})
    say(f"  acme/deploy: waiting for approval of {digest[:19]}… at version {version}")
    report.operators = approvers(version)
    for line in report.verdicts():
        say(f"  acme/deploy: operator {line}")
    deadline = time.monotonic() + wait_s
    while True:
        found = client.run(run_id)
        if found is not None and found["status"] == "executing":
            version = int(found["version"])
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{run_id}: no approval within {wait_s}s")
        time.sleep(0.1)
    send("record_tool_intent", {"invocationId": f"{run_id}-deploy", "toolName": "deploy"})
    if execute is not None:
        execute(f"{run_id}-deploy", DEPLOY)
    send("record_tool_outcome", {"invocationId": f"{run_id}-deploy", "outcome": "succeeded"})
    send("complete_run", {"resultRef": f"result:{run_id}"})
    final = client.run(run_id)
    report.final_status = final["status"] if final else None
    report.version = version
    say(f"  acme/deploy: {report.final_status} at version {version}")
    return report


def two_operators(url: str, token: str, run_id: str) -> Callable[[int], list[dict[str, Any]]]:
    """Two operators who both observed ``version``: one approval is accepted, one is stale."""

    def approve(version: int) -> list[dict[str, Any]]:
        return [
            operator_approves(url, token, run_id, "oncall@acme", version),
            operator_approves(url, token, run_id, "backup@acme", version),
        ]

    return approve


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the command API")
    parser.add_argument("--token", required=True, help="acme's bearer token")
    parser.add_argument("--run-id", default=f"demo-deploy-{int(time.time())}")
    args = parser.parse_args(argv)
    client = CommandClient(args.url, args.token)
    report = run_deploy(client, args.run_id, two_operators(args.url, args.token, args.run_id))
    return 0 if report.final_status == "succeeded" else 1


if __name__ == "__main__":
    raise SystemExit(main())
