"""``runtrail demo`` end to end against the real broker and every registered service.

The stack runs each service as its own process (``DevStack``, on the session's broker, on
fresh topics), the command API and its outbox relay included; the demo runs as a user runs it,
as a child process, and its printed summary is then held, line by line, against what the
services wrote: the capture files, the resume-cache store and its own /metrics, the projection
store, the audit store, the session store, the command store (the deploy run is driven by
commands, approved by one ``runtrail command approve`` process and refused as stale to a
second), the side-effect ledger and the exported chains (checked with the standalone
verifier).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runtrail.commands import EventStore
from runtrail.persistence import COMMAND_EVENTS, open_store
from runtrail_tools.demo.script import SCRIPTS
from runtrail_tools.devstack.ports import find_free_base
from runtrail_tools.devstack.scrape import fetch
from runtrail_tools.devstack.stack import DevStack, StackOptions, stack_names
from runtrail_tools.devstack.state import StackState
from runtrail_tools.kafka.ports import port_bindable
from tests.support import stack_settings

pytestmark = [pytest.mark.kafka]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def stack(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[DevStack, StackState]]:
    prefix = f"demo-{uuid.uuid4().hex[:8]}"
    settings = stack_settings(
        kafka_bootstrap,
        tmp_path / "state",
        prefix,
        partitions=3,
    )
    options = StackOptions(
        port_base=find_free_base(stack_names()), manage_broker=False, group_prefix=prefix
    )
    dev = DevStack(settings, options, say=lambda line: None)
    try:
        state = dev.up()
        yield dev, state
    finally:
        recorded = dev.load_state()
        assert dev.down() == []
        if recorded is not None:
            assert all(port_bindable(p) for p in recorded.all_ports())


@dataclass
class Printed:
    """One run's block of the printed summary."""

    key: str
    tenant: str
    run_id: str
    lines: dict[str, str] = field(default_factory=dict)
    operators: list[str] = field(default_factory=list)

    def match(self, section: str, pattern: str) -> tuple[str, ...]:
        found = re.fullmatch(pattern, self.lines[section])
        assert found, f"{self.key} {section}: {self.lines[section]!r} !~ {pattern!r}"
        return found.groups()


def parse_runs(stdout: str) -> dict[str, Printed]:
    runs: dict[str, Printed] = {}
    current: Printed | None = None
    for line in stdout.splitlines():
        head = re.fullmatch(r"run (\S+)\s+(\S+)/(\S+)", line)
        if head:
            current = Printed(*head.groups())
            runs[current.key] = current
            continue
        body = re.fullmatch(r"  (capture|resume-cache|projection|audit|sessions|commands|"
                            r"operator|side effects)\s+(.*)", line)  # fmt: skip
        if body and current is not None and body.group(1) == "operator":
            current.operators.append(body.group(2))
        elif body and current is not None:
            current.lines[body.group(1)] = body.group(2)
        elif not line.startswith("  "):
            current = None
    return runs


def check_commanded(
    run: Printed, projected: int, commands: EventStore, tenant: str, run_id: str
) -> None:
    """The deploy run came through the command API: the command store numbered all of its
    events (the projector and the audit chain saw exactly those, through the outbox relay);
    the first operator's approval was granted, the second refused as stale with the version
    the grant made current."""
    events = commands.events(tenant, run_id)
    version, _ = commands.load(tenant, run_id)
    assert [e.sequence for e in events] == list(range(1, version + 1))
    assert version == projected
    assert commands.outbox_size() == 0  # every event relayed
    grants = [e for e in events if e.type == "run.approval_granted"]
    assert len(grants) == 1 and grants[0].actor.kind == "operator"
    granted_at = grants[0].sequence
    by = grants[0].data.approved_by  # type: ignore[attr-defined]
    assert run.match(
        "commands", r"(\d+) events at version (\d+) in the command store; approval granted by (\S+)"
    ) == (str(len(events)), str(version), by)  # fmt: skip
    assert run.operators == [
        f"{by}: accepted at version {granted_at}",
        f"backup@acme: refused (stale), current version {granted_at}",
    ]
    assert "sessions" not in run.lines  # no publisher session: the run has no session


def test_the_demo_prints_what_the_services_recorded(
    stack: tuple[DevStack, StackState], tmp_path: Path
) -> None:
    _, state = stack
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNTRAIL_")}
    env["RUNTRAIL_SPOOL_DIR"] = str(tmp_path / "spool")
    done = subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", "demo", "--state-dir", state.state_dir],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    out = done.stdout
    runs = parse_runs(out)
    assert set(runs) == {s.key for s in SCRIPTS}
    state_dir = Path(state.state_dir)

    from runtrail.audit.store import verify_stored
    from runtrail.capture.reader import iter_records
    from runtrail.persistence import AUDIT_LINKS, PROJECTIONS, RESUME_ENTRIES, SESSION_SNAPSHOTS

    audit = open_store(AUDIT_LINKS, f"sqlite:///{state_dir / 'audit.db'}")
    projections = open_store(PROJECTIONS, f"sqlite:///{state_dir / 'projection.db'}")
    cache = open_store(RESUME_ENTRIES, f"sqlite:///{state_dir / 'resume-cache.db'}", readers=1)
    sessions = open_store(SESSION_SNAPSHOTS, (state_dir / "sessions").as_uri())
    commands = open_store(COMMAND_EVENTS, f"sqlite:///{state_dir / 'commands.db'}")
    ledger_files = list((state_dir / "demo").glob("*/side-effects.tsv"))
    assert len(ledger_files) == 1
    ledger = [line.split("\t") for line in ledger_files[0].read_text().splitlines()]
    try:
        for script in SCRIPTS:
            run = runs[script.key]
            assert run.tenant == script.tenant
            tenant, run_id = run.tenant, run.run_id

            # capture: the JSONL files under <state>/capture
            records = list(iter_records((state_dir / "capture").as_uri(), run_id, None, tenant))
            model = sum(r.node_type == "MODEL" for r in records)
            tool = sum(r.node_type == "TOOL" for r in records)
            retries = sum(r.retry_count for r in records)
            assert run.match(
                "capture",
                r"(\d+) model \+ (\d+) tool nodes, (\d+) retries, 0 incomplete, 0 duplicates",
            ) == (str(model), str(tool), str(retries))
            # the commanded run records tool intents and outcomes, which are no call nodes
            commanded = script.approval_step is not None
            if commanded:
                assert (model, tool, retries) == (0, 0, 0)
            else:
                assert (model, tool) == (script.expected_steps, script.expected_steps - (
                    0 if script.cancel_after_step else 1))  # fmt: skip
                assert retries == len(script.retry_steps)

            # resume-cache: its store, and (for the resumed run) its own lookup counter
            entries = [e for e in cache.entries(tenant) if e.run_id == run_id]
            m = sum(e.kind.value == "model" for e in entries)
            t = sum(e.kind.value == "tool" for e in entries)
            printed = run.match(
                "resume-cache", r"(\d+) model \+ (\d+) tool entries(?:; (\d+) cache hits on the resume)?"
            )  # fmt: skip
            assert printed[:2] == (str(m), str(t))
            if script.crash_after_step is not None:
                hits = fetch(state.services["resume-cache"].metrics_url)
                assert hits is not None
                total = hits.total("runtrail_resume_cache_lookups_total", outcome="hit")
                # every finished step before the crash: its model call and its tool call
                assert printed[2] == f"{total:.0f}" == str(2 * script.crash_after_step)

            # projector: the projection store
            row = projections.get(tenant, run_id)
            assert row is not None and not row.halted
            assert run.match("projection", r"(\w+) at version (\d+) \(not halted; .*\)") == (
                script.expect_status,
                str(row.version),
            )
            assert row.status == script.expect_status

            # audit: the link store; every event of the run is sealed, in a valid chain
            verdict = verify_stored(audit, tenant, run_id)
            assert verdict.valid and verdict.length == row.version
            assert run.match("audit", r"(\d+) links, chain valid") == (str(verdict.length),)

            if commanded:
                check_commanded(run, row.version, commands, tenant, run_id)
            else:
                # sessions: the session store holds the whole run
                snapshot = sessions.load(tenant, f"sess-{run_id}")
                assert snapshot is not None
                assert run.match("sessions", r"\S+: (\d+) events saved") == (
                    str(len(snapshot.event_log)),
                )
                assert len(snapshot.event_log) == row.version
                assert "commands" not in run.lines and not run.operators

            # side effects: the ledger, each exactly once, as many as the script has
            calls = [parts[1] for parts in ledger if parts[0] == run_id]
            assert len(calls) == len(set(calls)) == len(script.side_effect_steps)
            assert run.match("side effects", r"(\d+) in the ledger \(each once; script: (\d+)\).*") == (
                str(len(calls)),
                str(len(script.side_effect_steps)),
            )  # fmt: skip
    finally:
        for store in (audit, projections, cache, sessions, commands):
            store.close()

    # the tamper section: re-check both files with the standalone verifier
    exported = Path(re.search(r"  exported\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    tampered_at = re.search(r"  verify\s+INVALID at link (\d+) \(hash mismatch\)", out)
    assert re.search(r"  verify\s+valid \((\d+) links\)", out) and tampered_at
    tool = REPO / "tools" / "verify_audit_export.py"
    for path, valid in (
        (exported, True),
        (Path(str(exported).replace(".links", ".tampered.links")), False),
    ):
        check = subprocess.run(
            [sys.executable, str(tool), str(path)], capture_output=True, text=True
        )
        verdict = json.loads(check.stdout)
        assert verdict["valid"] is valid, verdict
        if not valid:
            assert str(verdict["firstBrokenIndex"]) == tampered_at.group(1)
