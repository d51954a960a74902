"""The demo's summary: per run, what each service's output says; then the tamper check.

The printed lines have a fixed shape (``  <section>  <facts>``) so a reader, and the end-to-end
test, can hold each one against the stores it came from. Sections of services that do not run
are left out.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtrail_tools.demo.readback import (
    AuditView,
    CacheView,
    CaptureView,
    CommandsView,
    ProjectionView,
    SessionView,
)
from runtrail_tools.demo.tamper import TamperReport, Verdict


@dataclass
class RunReport:
    key: str
    tenant: str
    run_id: str
    expect_status: str
    side_effects: list[str] = field(default_factory=list)
    expected_side_effects: int = 0
    crashed_and_resumed: bool = False
    resume_hits: float | None = None
    capture: CaptureView | None = None
    cache: CacheView | None = None
    projection: ProjectionView | None = None
    audit: AuditView | None = None
    session: SessionView | None = None
    #: Driven by the command API (accepted through the command store) instead of a publisher.
    commanded: bool = False
    commands: CommandsView | None = None
    #: Per operator process, what the command API answered to its approval.
    operators: list[str] = field(default_factory=list)


@dataclass
class DemoReport:
    events_topic: str
    bootstrap_servers: str
    services: list[str]
    runs: list[RunReport] = field(default_factory=list)
    lag_left: dict[str, int] = field(default_factory=dict)
    tamper: TamperReport | None = None
    notes: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """What contradicts the scripts (the demo exits 1 if anything does)."""
        found: list[str] = []
        for r in self.runs:
            name = f"{r.tenant}/{r.key}"
            if len(r.side_effects) != len(set(r.side_effects)):
                found.append(f"{name}: a side effect was repeated")
            if len(set(r.side_effects)) != r.expected_side_effects:
                found.append(f"{name}: {len(r.side_effects)} side effects, expected "
                             f"{r.expected_side_effects}")  # fmt: skip
            if r.projection is not None and (
                r.projection.status != r.expect_status or r.projection.halted
            ):
                found.append(
                    f"{name}: projection {r.projection.status}, expected {r.expect_status}"
                )
            if r.audit is not None and not r.audit.valid:
                found.append(f"{name}: audit chain invalid ({r.audit.reason})")
            if r.capture is not None and (r.capture.duplicates or r.capture.incomplete):
                found.append(f"{name}: capture has duplicates or incomplete nodes")
            if r.crashed_and_resumed and not r.resume_hits:
                found.append(f"{name}: the resume had no cache hits")
            if r.commanded:
                found += _approval_problems(name, r)
        found += [f"{k} did not catch up ({v} behind)" for k, v in self.lag_left.items() if v]
        if self.tamper is not None:
            if not self.tamper.original.valid:
                found.append("the untouched audit export does not verify")
            if self.tamper.after.valid:
                found.append("the tampered audit export still verifies")
        return found

    def to_json(self) -> dict[str, Any]:
        def convert(value: Any) -> Any:
            if isinstance(value, Path):
                return str(value)
            return value

        raw = dataclasses.asdict(self)
        converted: dict[str, Any] = json.loads(json.dumps(raw, default=convert))
        return converted


def _approval_problems(name: str, r: RunReport) -> list[str]:
    """A commanded run: exactly one approval granted, every other one refused as stale."""
    found: list[str] = []
    accepted = [v for v in r.operators if ": accepted at version" in v]
    stale = [v for v in r.operators if ": refused (stale)" in v]
    if len(accepted) != 1 or len(stale) != len(r.operators) - 1:
        found.append(f"{name}: expected one approval accepted, the others stale: {r.operators}")
    if r.commands is not None and len(r.commands.granted_by) != 1:
        found.append(f"{name}: the command store holds {len(r.commands.granted_by)} grants")
    return found


def _verdict(v: Verdict) -> str:
    if v.valid:
        return f"valid ({v.length} links)"
    return f"INVALID at link {v.first_broken_index} ({v.reason})"


def _run_lines(r: RunReport) -> list[str]:
    lines = [f"run {r.key:<9} {r.tenant}/{r.run_id}"]
    if r.capture is not None:
        c = r.capture
        lines.append(
            f"  capture       {c.model_nodes} model + {c.tool_nodes} tool nodes, "
            f"{c.retries} retries, {c.incomplete} incomplete, {c.duplicates} duplicates"
        )
    if r.cache is not None:
        line = (
            f"  resume-cache  {r.cache.model_entries} model + {r.cache.tool_entries} tool entries"
        )
        if r.crashed_and_resumed and r.resume_hits is not None:
            line += f"; {r.resume_hits:.0f} cache hits on the resume"
        lines.append(line)
    if r.projection is not None:
        p = r.projection
        state = "HALTED: " + str(p.halt_reason) if p.halted else "not halted"
        lines.append(
            f"  projection    {p.status} at version {p.version} ({state}; "
            f"{p.model_nodes} model nodes, {p.tool_nodes} tool nodes, {p.retries} retries)"
        )
    if r.audit is not None:
        a = r.audit
        verdict = "chain valid" if a.valid else f"chain INVALID at {a.first_broken_index}"
        lines.append(f"  audit         {a.links} links, {verdict}")
    if r.session is not None:
        lines.append(f"  sessions      {r.session.session_id}: {r.session.events} events saved")
    if r.commands is not None:
        cv = r.commands
        lines.append(
            f"  commands      {cv.events} events at version {cv.version} in the command store; "
            f"approval granted by {', '.join(cv.granted_by) or 'nobody'}"
        )
    for verdict in r.operators:
        lines.append(f"  operator      {verdict}")
    once = len(r.side_effects) == len(set(r.side_effects))
    lines.append(
        f"  side effects  {len(r.side_effects)} in the ledger "
        f"({'each once' if once else 'REPEATED'}; script: {r.expected_side_effects})"
        + ("; crashed after a step, resumed by a new process" if r.crashed_and_resumed else "")
    )
    return lines


def format_report(report: DemoReport) -> str:
    out = ["", f"== what the services recorded ({', '.join(report.services)}) =="]
    for run in report.runs:
        out += _run_lines(run)
    behind = {k: v for k, v in report.lag_left.items() if v}
    if behind:
        out.append(f"warning: not caught up in time: {behind}")
    t = report.tamper
    if t is not None:
        out += [
            "",
            f"== audit export of {t.tenant}/{t.run_id} ==",
            f"  exported      {t.export}",
            f"  verify        {_verdict(t.original)}",
            f"  tampered      link {t.changed['index']} ({t.changed['type']}): "
            f"{t.changed['field']} {t.changed['from']!r} -> {t.changed['to']!r}",
            f"  verify        {_verdict(t.after)}",
        ]
        if t.independent_original is not None and t.independent_after is not None:
            out.append(
                f"  independent   tools/verify_audit_export.py: "
                f"{_verdict(t.independent_original)} / {_verdict(t.independent_after)}"
            )
    for note in report.notes:
        out.append(f"note: {note}")
    return "\n".join(out)
