"""The demo's verdict on the commanded deploy run: one approval accepted, every other one
refused as stale, one grant in the command store; anything else is a problem (exit 1)."""

from __future__ import annotations

import json

from runtrail_tools.demo.approval import verdict
from runtrail_tools.demo.readback import CommandsView
from runtrail_tools.demo.report import DemoReport, RunReport


def operator(by: str, accepted: bool, code: str, version: int) -> dict[str, object]:
    """What ``runtrail command approve`` leaves: its exit status and the JSON outcome."""
    answer = {"accepted": accepted, "code": code, "version": version}
    return {"by": by, "exit": 0 if accepted else 1, "stdout": json.dumps(answer), "stderr": ""}


def deploy(operators: list[str], grants: tuple[str, ...]) -> RunReport:
    return RunReport(
        key="deploy",
        tenant="acme",
        run_id="r",
        expect_status="succeeded",
        commanded=True,
        commands=CommandsView(10, 10, grants),
        operators=operators,
    )


def problems(report: RunReport) -> list[str]:
    return DemoReport("e", "b", [], runs=[report]).problems()


def test_the_verdict_names_the_outcome_and_the_current_version() -> None:
    assert verdict(operator("a", True, "accepted", 7)) == "a: accepted at version 7"
    assert verdict(operator("b", False, "stale", 7)) == "b: refused (stale), current version 7"
    silent = {"by": "c", "exit": 2, "stdout": "", "stderr": "runtrail command: no answer\n"}
    assert verdict(silent) == "c: no answer (exit 2: runtrail command: no answer)"


def test_one_accepted_and_one_stale_is_no_problem_anything_else_is() -> None:
    good = [verdict(operator("a", True, "accepted", 7)), verdict(operator("b", False, "stale", 7))]
    assert problems(deploy(good, ("a",))) == []
    both = [
        verdict(operator("a", True, "accepted", 7)),
        verdict(operator("b", True, "accepted", 8)),
    ]
    assert any("one approval accepted" in p for p in problems(deploy(both, ("a", "b"))))
    other = [
        verdict(operator("a", True, "accepted", 7)),
        verdict(operator("b", False, "invalid", 7)),
    ]
    assert any("one approval accepted" in p for p in problems(deploy(other, ("a",))))
    assert any("2 grants" in p for p in problems(deploy(good, ("a", "b"))))
