"""Every secret shape through every store, on the real broker and every service (12.9, 12.11).

Two runs carry every shape of ``tests/secret_shapes.py`` (fresh secrets each): one published
through the Python API (``Publisher.publish``), one through ``runtrail publish FILE.jsonl``.
The dev stack runs every registered service (capture, resume-cache, sessions, audit,
projector, noop) as its own process under umask 000; once every group has committed to the
end of the topic, the audit chain of each run is exported with the CLI. Then:

* no secret text is found in any byte of any file under the state folder (capture JSONL,
  SQLite stores and their WAL, session snapshots, exports, the spool, logs), nor in any value
  or header of any topic (events, dead letters, resume-cache, sessions, audit);
* the canary beside each secret *is* found in each store that holds that field, so the
  absence of the secret means it was masked, not that the store never saw it;
* every file the stack and the CLI created is 0600 and every folder 0700.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.events import CURRENT_VERSIONS
from runtrail.publisher import Publisher
from runtrail.runtime.registry import SERVICES
from runtrail_tools.devstack.catchup import end_offsets, wait_caught_up
from runtrail_tools.devstack.ports import find_free_base
from runtrail_tools.devstack.stack import DevStack, StackOptions
from tests.secret_shapes import Shape, shapes
from tests.support import consume_all, stack_settings

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def run_events(run_id: str, session_id: str, found: list[Shape]) -> list[dict[str, Any]]:
    """(type, envelope extras, data) of one run that puts every shape in every event kind."""
    data_shapes = [s.value for s in found if s.place == "data"]
    texts = [s.value for s in found if s.place == "text"]
    (envelope,) = [s.value for s in found if s.place == "envelope"]
    messages = [{"role": "user", "content": t} for t in texts]
    call_id = f"call-{uuid.uuid4().hex[:8]}"
    steps: list[tuple[str, int | None, dict[str, Any]]] = [
        ("run.accepted", None, {"goalRef": f"goal://{run_id}", "policyVersion": "p-1"}),
        ("MODEL_REQUEST", 1, {"prompt": {"messages": messages, "headers": data_shapes}}),
        ("MODEL_RESPONSE", 1, {"message": texts[0], "raw": {"echo": messages, "h": data_shapes}}),
        (
            "TOOL_CALL",
            1,
            {"callId": call_id, "toolName": "http", "arguments": {"h": data_shapes, "q": texts}},
        ),
        (
            "TOOL_RESULT",
            1,
            {"callId": call_id, "toolName": "http", "output": {"h": data_shapes, "body": texts}},
        ),
        ("STEP_END", 1, {"reason": "done"}),
        ("run.failed", None, {"reason": "\n".join(texts)}),
    ]
    return [
        {
            "type": kind,
            "runId": run_id,
            "sessionId": session_id,
            "turnId": "turn-1" if step else None,
            "step": step,
            "correlationId": envelope,
            "data": data,
        }
        for kind, step, data in steps
    ]


@pytest.fixture
def no_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def stack(
    kafka_bootstrap: str, tmp_path: Path, no_umask: None
) -> Iterator[tuple[DevStack, Settings]]:
    prefix = f"secrets-{uuid.uuid4().hex[:8]}"
    settings = stack_settings(
        kafka_bootstrap,
        tmp_path / "state",
        prefix,
        partitions=2,
        spool_dir=tmp_path / "state" / "spool",
    )
    options = StackOptions(
        port_base=find_free_base(SERVICES), manage_broker=False, group_prefix=prefix
    )
    dev = DevStack(settings, options, say=lambda line: None)
    try:
        dev.up()
        yield dev, settings.model_copy(update={"state_dir": dev.state_dir})
    finally:
        assert dev.down() == []


def cli_env(settings: Settings, tenant: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RUNTRAIL_")}
    return {
        **base,
        "RUNTRAIL_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "RUNTRAIL_EVENTS_TOPIC": settings.events_topic,
        "RUNTRAIL_SPOOL_DIR": str(settings.spool_dir),
        "RUNTRAIL_STATE_DIR": str(settings.state_dir),
        "RUNTRAIL_TENANT": tenant,
    }


def runtrail(settings: Settings, tenant: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(settings, tenant),
    )


def every_file(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def topic_bytes(settings: Settings, topic: str) -> list[bytes]:
    try:
        expect = sum(end_offsets(settings, topic).values())
    except Exception:  # a topic nobody wrote to (e.g. no dead letters) may not exist
        return []
    out = []
    for msg in consume_all(settings.bootstrap_servers, topic, expect=expect, timeout=60):
        out.append(msg.value() or b"")
        out.extend(v for _, v in (msg.headers() or []) if v)
    return out


def test_no_secret_shape_reaches_any_store_and_every_store_is_private(
    stack: tuple[DevStack, Settings], tmp_path: Path
) -> None:
    dev, settings = stack
    api_shapes, cli_shapes = shapes(), shapes()
    api_run, cli_run = f"api-{uuid.uuid4().hex[:8]}", f"cli-{uuid.uuid4().hex[:8]}"

    # --- through the Python API -----------------------------------------------------------
    publisher = Publisher(settings.model_copy(update={"tenant": "acme"}))
    try:
        for e in run_events(api_run, f"sess-{api_run}", api_shapes):
            eid = publisher.publish(
                e["type"],
                e["runId"],
                e["data"],
                session_id=e["sessionId"],
                turn_id=e["turnId"],
                step=e["step"],
                correlation_id=e["correlationId"],
            )
            assert eid is not None, e["type"]
        # an identifier holding a secret is refused, with the field named, not masked
        refused = publisher.submit(
            {
                "type": "STEP_END",
                "schemaVersion": 1,
                "runId": "run-" + api_shapes[7].secret,
                "data": {},
            }
        )
        assert refused.reason == "secret-in-identifier" and "runId" in (refused.detail or "")
        assert publisher.flush(30) == 0
    finally:
        publisher.close()

    # --- through runtrail publish ---------------------------------------------------------
    lines = []
    for e in run_events(cli_run, f"sess-{cli_run}", cli_shapes):
        e["schemaVersion"] = CURRENT_VERSIONS[e["type"]]
        lines.append(json.dumps(e))
    events_file = tmp_path / "cli-run.jsonl"
    events_file.write_text("\n".join(lines) + "\n")
    published = runtrail(settings, "globex", "publish", str(events_file))
    assert published.returncode == 0, published.stdout + published.stderr

    # --- every service has written everything, then the exports --------------------------
    groups = {name: f"{dev.options.group_prefix}.{name}" for name in SERVICES}
    lags = wait_caught_up(settings, groups, settings.events_topic, timeout=180)
    assert all(lag == 0 for lag in lags.values()), lags
    exports = settings.state_dir / "exports"
    for tenant, run in (("acme", api_run), ("globex", cli_run)):
        done = runtrail(
            settings, tenant, "audit", "export", "--run", run, "-o", str(exports / f"{run}.jsonl")
        )
        assert done.returncode == 0, done.stdout + done.stderr

    # --- grep every store -----------------------------------------------------------------
    files = every_file(settings.state_dir)
    stores = {
        "capture": [b for p, b in files.items() if "capture" in p.parts],
        "resume-cache": [b for p, b in files.items() if p.name.startswith("resume-cache.db")],
        "sessions": [b for p, b in files.items() if "sessions" in p.parts],
        "audit": [b for p, b in files.items() if p.name.startswith("audit.db")],
        "projection": [b for p, b in files.items() if p.name.startswith("projection.db")],
        "exports": [b for p, b in files.items() if "exports" in p.parts],
        "events topic": topic_bytes(settings, settings.events_topic),
    }
    topics = [
        settings.dlq_topic,
        settings.resume_cache_topic,
        settings.sessions_topic,
        settings.audit_topic,
    ]
    everything = list(files.values()) + [b for t in topics for b in topic_bytes(settings, t)]
    everything += stores["events topic"]
    for name, blobs in stores.items():
        assert blobs, f"{name}: nothing found to check"

    for shape in api_shapes + cli_shapes:
        secret = shape.secret.encode()
        leaks = [str(p) for p, b in files.items() if secret in b]
        assert not leaks, f"{shape.name}: secret found in {leaks}"
        assert not any(secret in b for b in everything), f"{shape.name}: secret on a topic"
        canary = shape.canary.encode()
        for name in ("events topic", "audit", "exports", "sessions"):
            assert any(canary in b for b in stores[name]), f"{shape.name}: canary not in {name}"
        if shape.place != "envelope":  # node I/O holds data, not the envelope's free text
            for name in ("capture", "resume-cache"):
                assert any(canary in b for b in stores[name]), f"{shape.name}: no canary in {name}"
        if shape.place == "text":  # the projection keeps the run's failure reason verbatim
            assert any(canary in b for b in stores["projection"]), f"{shape.name}: not projected"

    # --- and every file of the stores is the owner's alone ---------------------------------
    wrong = {}
    for path in [settings.state_dir, *settings.state_dir.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_symlink():
            continue
        if mode != (0o700 if path.is_dir() else 0o600) and not path.name.endswith(".pub"):
            wrong[str(path.relative_to(settings.state_dir))] = f"{mode:04o}"
    assert not wrong, json.dumps(wrong, indent=1)
