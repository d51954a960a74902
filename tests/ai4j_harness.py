"""The ai4j conformance harness (``tests/ai4j/``): built once, then run as a subprocess.

ai4j-agent is the seed documents' own Java implementation; its jars are not on Maven Central,
so ``install.sh`` of the shared ai4j folder puts them into the local Maven repository first
(found via ``RUNTRAIL_AI4J_DIR``, else ``../shared/ai4j`` beside the repository). The Maven
build is keyed by a hash of the harness project and kept under ``RUNTRAIL_AI4J_CACHE``
(default ``~/.cache/runtrail/ai4j-harness``), so a test session builds at most once and a
rebuild happens only when the harness changes. Maven runs offline when it can, online (the
ordinary client against Maven Central) only for the first fetch.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.kafka_fixture import REQUIRE_ENV, services_required

PROJECT = Path(__file__).resolve().parent / "ai4j"
REPO = PROJECT.parents[1]
AI4J_VERSION = "2.4.3-SNAPSHOT"
AI4J_JAR = (
    Path.home()
    / ".m2/repository/io/github/lnyo-cly/ai4j-agent"
    / AI4J_VERSION
    / f"ai4j-agent-{AI4J_VERSION}.jar"
)
BUILD_TIMEOUT_S = 600.0
RUN_TIMEOUT_S = 120.0
#: how the tests start their short Java programs (this harness, the adapter's driver): the C1
#: compiler alone, as the suite's brokers run; a driver run took 0.9 CPU-s instead of 1.3
JAVA = ("java", "-XX:TieredStopAtLevel=1")


class HarnessUnavailable(RuntimeError):
    """Java, Maven or the ai4j jars are missing here."""


@dataclass(frozen=True)
class Harness:
    """A built harness: ``java -cp classpath runtrail.ai4j.Harness MODE``."""

    classpath: str

    def _run(self, mode: str, stdin: bytes = b"") -> Any:
        proc = subprocess.run(
            [*JAVA, "-cp", self.classpath, "runtrail.ai4j.Harness", mode],
            input=stdin,
            capture_output=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"ai4j harness {mode} failed: {proc.stderr.decode()[-2000:]}")
        return json.loads(proc.stdout)

    def capture(self, sequences: dict[str, list[dict[str, Any]]]) -> dict[str, list[Any]]:
        """Per sequence name, the records ai4j's IoCaptureAgentListener wrote (JSONL sink)."""
        body = {"sequences": [{"name": n, "events": ev} for n, ev in sequences.items()]}
        result: dict[str, list[Any]] = self._run("capture", json.dumps(body).encode())
        return result

    def emit(self) -> list[dict[str, Any]]:
        """The events ai4j's real ReAct runtime publishes for the scripted run."""
        events: list[dict[str, Any]] = self._run("emit")
        return events


def project_digest() -> str:
    """Hash of everything the build reads from this repository."""
    h = hashlib.sha256()
    for path in sorted(p for p in PROJECT.rglob("*") if p.is_file() and "target" not in p.parts):
        h.update(str(path.relative_to(PROJECT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def ai4j_dir() -> Path | None:
    """The shared ai4j folder (jars + install.sh), if this machine has one."""
    candidates = [os.environ.get("RUNTRAIL_AI4J_DIR"), REPO.parent / "shared" / "ai4j"]
    for candidate in candidates:
        if candidate:
            folder = REPO / candidate  # a relative setting is relative to the repository
            if (folder / "install.sh").is_file():
                return folder
    return None


def _install_ai4j() -> None:
    if AI4J_JAR.is_file():
        return
    folder = ai4j_dir()
    if folder is None:
        raise HarnessUnavailable(
            f"ai4j {AI4J_VERSION} is not in the local Maven repository and no install.sh was "
            "found (set RUNTRAIL_AI4J_DIR or put the shared ai4j folder beside the repository)"
        )
    subprocess.run(["bash", str(folder / "install.sh")], check=True, timeout=BUILD_TIMEOUT_S)


def _maven(out: Path, offline: bool) -> subprocess.CompletedProcess[bytes]:
    cmd = ["mvn", "-q", "-B", f"-Dharness.out={out}", "package"]
    if offline:
        cmd.insert(1, "-o")
    return subprocess.run(
        cmd, cwd=PROJECT, capture_output=True, timeout=BUILD_TIMEOUT_S, check=False
    )


def build(cache_root: Path | None = None) -> Harness:
    """The harness for the current sources, building it if this hash was never built."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise HarnessUnavailable(f"{tool} is not on PATH")
    root = cache_root or Path(
        os.environ.get("RUNTRAIL_AI4J_CACHE", Path.home() / ".cache/runtrail/ai4j-harness")
    )
    root.mkdir(parents=True, exist_ok=True)
    out = root / project_digest()
    done = out / "classpath.txt"
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel sessions build once, the others wait
        if not done.is_file():
            _install_ai4j()
            proc = _maven(out, offline=True)
            if proc.returncode != 0:  # first fetch of plugins and dependencies
                proc = _maven(out, offline=False)
            if proc.returncode != 0 or not done.is_file():
                output = (proc.stdout + proc.stderr).decode()[-3000:]
                raise RuntimeError(f"Maven build of {PROJECT} failed:\n{output}")
    return Harness(f"{out / 'classes'}{os.pathsep}{done.read_text().strip()}")


@cache
def _session_harness() -> Harness | str:
    try:
        return build()
    except HarnessUnavailable as exc:
        return str(exc)


def harness() -> Harness:
    """The session's harness; skips (or fails, with ``RUNTRAIL_REQUIRE_SERVICES=1``) without it."""
    built = _session_harness()
    if isinstance(built, str):
        message = f"no ai4j harness: {built}"
        if services_required():
            pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(message)
    return built
