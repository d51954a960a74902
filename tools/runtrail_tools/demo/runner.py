"""The demo: drive the scripted runs through the stack, wait for the services, read back.

1. The runs that do not crash go concurrently, in threads of this process, through one
   :class:`~runtrail.publisher.Publisher` (its metrics, spool depth included, are served on the
   stack's agent port for Prometheus). The run that crashes runs in a child process that kills
   itself after a step; a second child resumes it against the resume-cache service.
   With a command API in the stack, the run that needs an approval is command-driven from
   its first event (a run has one source of sequence numbers): :mod:`.approval` sends its
   commands, two ``runtrail command approve`` processes approve it at the same observed
   version, one is accepted and the other refused as stale; the outbox relay puts its events
   on the events topic.
2. The demo waits until the outbox is relayed and every service's consumer group has committed
   up to the end of the events topic: a service commits only once its output is durable, so
   everything is written.
3. Each run is read back from the services' outputs (:mod:`.readback`), and one run's audit
   chain is exported, tampered with and verified (:mod:`.tamper`).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from runtrail_tools.demo.agent import AgentRun, TenantPublisher
from runtrail_tools.demo.approval import ApprovalDemo, run_deploy, two_operators
from runtrail_tools.demo.fakes import LedgerTools, ledger_effects
from runtrail_tools.demo.readback import Readers, ledger_path, open_readers
from runtrail_tools.demo.report import DemoReport, RunReport
from runtrail_tools.demo.script import RunScript, scripts_for
from runtrail_tools.demo.tamper import export_and_tamper
from runtrail_tools.demo.targets import Targets
from runtrail_tools.devstack.catchup import wait_caught_up

Say = Callable[[str], None]


class DemoError(RuntimeError):
    """The demo could not run (a child agent failed, the stack is unusable)."""


def new_stamp() -> str:
    """Makes this demo's run IDs unique, so a demo can run again on the same stack."""
    return f"{time.strftime('%m%d%H%M%S')}-{secrets.token_hex(2)}"


#: The agent each framework's runs are driven by (a module with a ``main`` for the child runs).
AGENT_MODULES = {
    "scripted": "runtrail_tools.demo.agent",
    "langgraph": "runtrail_tools.demo.langgraph_agent",
}


class Demo:
    def __init__(
        self,
        targets: Targets,
        base: Path | None = None,
        *,
        say: Say = print,
        framework: str = "scripted",
    ) -> None:
        """``base``: where the demo keeps its files (default ``<state dir>/demo``); each demo
        writes under ``base/<stamp>``: the side-effect ledger, spools, audit exports.
        ``framework``: ``scripted`` (the hand-written agent loop) or ``langgraph`` (a real
        LangGraph agent through runtrail's LangChain adapter)."""
        if framework not in AGENT_MODULES:
            raise DemoError(f"unknown framework {framework!r} (known: {', '.join(AGENT_MODULES)})")
        self.framework = framework
        self.scripts = scripts_for(framework)
        self.targets = targets
        self.say = say
        self.stamp = new_stamp()
        root = base if base is not None else targets.settings.state_dir / "demo"
        self.workdir = root.expanduser().resolve() / self.stamp
        self.ledger = ledger_path(self.workdir)
        self.approvals: dict[str, ApprovalDemo] = {}

    def run_id(self, script: RunScript) -> str:
        return f"demo-{self.stamp}-{script.key}"

    # --- the agents ---------------------------------------------------------------------------
    def _remote(self, tenant: str) -> Any:
        endpoint = self.targets.services.get("resume-cache")
        if endpoint is None or endpoint.api_url is None:
            return None
        from runtrail.resume.http_client import ServiceCacheClient

        return ServiceCacheClient(
            endpoint.api_url, self.targets.tokens.get(tenant, ""), wait_ms=20_000
        )

    def _child(self, script: RunScript, *flags: str) -> subprocess.CompletedProcess[str]:
        endpoint = self.targets.services["resume-cache"]
        tokens = self.workdir / "tokens.json"
        fd = os.open(tokens, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(self.targets.tokens, out)
        s = self.targets.settings
        env = {
            **os.environ,
            "RUNTRAIL_BOOTSTRAP_SERVERS": s.bootstrap_servers,
            "RUNTRAIL_EVENTS_TOPIC": s.events_topic,
            "RUNTRAIL_KAFKA_OPTIONS": json.dumps(s.kafka_options),
            "RUNTRAIL_KAFKA_OPTION_FILES": json.dumps(
                {k: str(v) for k, v in s.kafka_option_files.items()}
            ),
        }
        argv = [
            sys.executable, "-m", AGENT_MODULES[self.framework],
            "--script", script.key, "--run-id", self.run_id(script),
            "--ledger", str(self.ledger), "--spool-dir", str(self.workdir / "spool-agent"),
            "--cache-url", str(endpoint.api_url), "--tokens-file", str(tokens), *flags,
        ]  # fmt: skip
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)

    def _crash_and_resume(self, script: RunScript, readers: Readers) -> float | None:
        """First life dies by SIGKILL after its crash step; a new process resumes the run.
        The resume-cache service's hit counter is read around the resume."""
        name = f"{script.tenant}/{script.key}"
        first = self._child(script, "--crash")
        if first.returncode != -9:
            raise DemoError(f"{name}: expected a SIGKILL, got exit {first.returncode}:\n"
                            f"{first.stderr[-2000:]}")  # fmt: skip
        self.say(f"  {name}: killed (SIGKILL) after step {script.crash_after_step}; resuming")
        before = readers.cache_hits()
        second = self._child(script, "--resume")
        if second.returncode != 0:
            raise DemoError(f"{name}: the resume failed (exit {second.returncode}):\n"
                            f"{second.stderr[-2000:]}")  # fmt: skip
        after = readers.cache_hits()
        self.say(f"  {name}: resumed run finished")
        if before is None or after is None:
            return None
        return after - before

    def _in_thread(self, script: RunScript, publisher: Any) -> str:
        if self.framework == "langgraph":
            return self._langgraph_in_thread(script, publisher)
        run = AgentRun(
            script,
            self.run_id(script),
            TenantPublisher(publisher, script.tenant),
            self.ledger,
            self._remote(script.tenant),
        )
        steps = run.execute()
        if run.remote is not None:
            run.remote.close()
        self.say(f"  {script.tenant}/{script.key}: {steps} steps, done")
        return run.run_id

    def commanded(self, script: RunScript) -> bool:
        """Whether ``script`` runs through the command API (the run with an approval, when
        the stack has one): from its first event, so the command store numbers it alone."""
        endpoint = self.targets.services.get("command-api")
        return (
            script.approval_step is not None
            and self.framework == "scripted"
            and endpoint is not None
            and endpoint.api_url is not None
        )

    def _commanded_in_thread(self, script: RunScript) -> str:
        """The approval run, driven by commands; its operators are second processes."""
        endpoint = self.targets.services["command-api"]
        url, token = str(endpoint.api_url), self.targets.tokens.get(script.tenant, "")
        run_id = self.run_id(script)
        from runtrail.commands.client import CommandClient
        from runtrail.resume import ToolInvocation

        tools = LedgerTools(self.ledger, run_id, frozenset({"deploy"}))

        def deploy(invocation_id: str, action: dict[str, Any]) -> None:
            call = ToolInvocation(
                action["tool"], action["arguments"], call_id=invocation_id,
                idempotency_key=invocation_id,
            )  # fmt: skip
            tools.execute(call)

        self.approvals[run_id] = run_deploy(
            CommandClient(url, token),
            run_id,
            two_operators(url, token, run_id),
            say=self.say,
            execute=deploy,
        )
        return run_id

    def _wait_relayed(self, readers: Readers) -> None:
        """Every commanded event is on the events topic before the catch-up is measured."""
        deadline = time.monotonic() + self.targets.timeout_s
        while (left := readers.outbox_pending()) > 0:
            if time.monotonic() > deadline:
                raise DemoError(f"the outbox relay left {left} events unrelayed")
            time.sleep(0.1)

    def _langgraph_in_thread(self, script: RunScript, publisher: Any) -> str:
        """A run that does not crash: the LangGraph agent in this process, on the shared
        publisher, resumable through the resume-cache service like any other."""
        from runtrail.adapters.langchain_resumable import ResumableRun
        from runtrail.resume import ResumeCache
        from runtrail_tools.demo.langgraph_agent import drive

        run_id = self.run_id(script)
        view = TenantPublisher(publisher, script.tenant)
        remote = self._remote(script.tenant)
        cache = ResumeCache(
            run_id,
            tenant=script.tenant,
            remote=remote,
            fresh_run=True,
            read_your_writes=view.acked_offsets,
        )
        run = ResumableRun(view, cache, session_id=f"sess-{run_id}", idempotent=script.idempotent)
        try:
            state, _ = drive(run, script, self.ledger)
        finally:
            if remote is not None:
                remote.close()
        self.say(f"  {script.tenant}/{script.key}: {len(state['messages'])} messages, done")
        return run_id

    def _serve_metrics(self, registry: CollectorRegistry) -> Any:
        port = self.targets.agent_port
        if not port:
            return None
        from prometheus_client import start_http_server

        try:
            server, _ = start_http_server(port, self.targets.agent_host, registry)
        except OSError as exc:
            self.say(f"  (agent metrics not served on :{port}: {exc})")
            return None
        self.say(f"  agent metrics on http://{self.targets.agent_host}:{port}/metrics")
        return server

    def drive(self, readers: Readers) -> dict[str, float | None]:
        """Run every script; the resume's cache hits per resumed run ID."""
        from runtrail.publisher import Publisher

        s = self.targets.settings
        registry = CollectorRegistry()
        settings = s.model_copy(update={"spool_dir": self.workdir / "spool"})
        publisher = Publisher(settings, registry=registry)
        server = self._serve_metrics(registry)
        endpoint = self.targets.services.get("resume-cache")
        can_resume = endpoint is not None and endpoint.api_url is not None
        crashing = [x for x in self.scripts if x.crash_after_step is not None and can_resume]
        hits: dict[str, float | None] = {}
        try:
            with ThreadPoolExecutor(max_workers=len(self.scripts)) as pool:
                futures = [
                    pool.submit(self._commanded_in_thread, x)
                    if self.commanded(x)
                    else pool.submit(self._in_thread, x, publisher)
                    for x in self.scripts
                    if x not in crashing
                ]
                for x in crashing:
                    hits[self.run_id(x)] = self._crash_and_resume(x, readers)
                for future in futures:
                    future.result()
            publisher.flush(30.0)
        finally:
            publisher.close()
            if server is not None:
                server.shutdown()
        return hits

    # --- the whole demo -----------------------------------------------------------------------
    def run(self) -> DemoReport:
        t = self.targets
        self.workdir.mkdir(parents=True, exist_ok=True)
        report = DemoReport(
            events_topic=t.settings.events_topic,
            bootstrap_servers=t.settings.bootstrap_servers,
            services=sorted(t.services),
        )
        tenants = sorted({x.tenant for x in self.scripts})
        agent = "LangGraph agent" if self.framework == "langgraph" else "scripted agent"
        self.say(
            f"runtrail demo {self.stamp} ({agent}): {len(self.scripts)} runs of "
            f"{len(tenants)} tenants "
            f"({', '.join(tenants)}) on {t.settings.events_topic} at {t.settings.bootstrap_servers}"
        )
        if not t.has("resume-cache"):
            report.notes.append("no resume-cache service: the crashing run ran without a crash")
        with open_readers(t) as opened:
            hits = self.drive(opened)
            self._wait_relayed(opened)
            self.say(f"  waiting for {', '.join(sorted(t.groups())) or 'no service'} to catch up")
            report.lag_left = wait_caught_up(
                t.settings, t.groups(), t.settings.events_topic, timeout=t.timeout_s
            )
            for x in self.scripts:
                report.runs.append(self._read_back(x, opened, hits))
            if t.has("audit"):
                chosen = next((x for x in self.scripts if x.approval_step), self.scripts[0])
                report.tamper = export_and_tamper(
                    opened.audit_store(), chosen.tenant, self.run_id(chosen), self.workdir / "audit"
                )
        return report

    def _read_back(
        self, x: RunScript, readers: Readers, hits: dict[str, float | None]
    ) -> RunReport:
        run_id = self.run_id(x)
        approval = self.approvals.get(run_id)
        return RunReport(
            key=x.key,
            tenant=x.tenant,
            run_id=run_id,
            expect_status=x.expect_status,
            side_effects=ledger_effects(self.ledger, run_id),
            expected_side_effects=len(x.side_effect_steps),
            crashed_and_resumed=run_id in hits,
            resume_hits=hits.get(run_id),
            capture=readers.capture(x.tenant, run_id),
            cache=readers.cache(x.tenant, run_id),
            projection=readers.projection(x.tenant, run_id),
            audit=readers.audit(x.tenant, run_id),
            session=None if approval else readers.session(x.tenant, f"sess-{run_id}"),
            commanded=approval is not None,
            commands=readers.commands(x.tenant, run_id) if approval else None,
            operators=approval.verdicts() if approval else [],
        )
