"""The ai4j adapter (``adapters/ai4j/``): built once per session, its Java driver run as a subprocess.

Like the conformance harness (:mod:`tests.ai4j_harness`, whose ai4j installation and cache
layout it shares), the Maven build is keyed by a hash of the module and of the committed
``schemas/runtrail_schemas/*.avsc`` the jar ships, kept under ``RUNTRAIL_AI4J_CACHE``; Maven runs offline when it
can, online (the ordinary client) only for the first fetch. The driver
(``adapters/ai4j/src/test/java/.../Driver.java``) takes JSON on stdin and prints JSON.
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

from tests.ai4j_harness import BUILD_TIMEOUT_S, JAVA, REPO, HarnessUnavailable, _install_ai4j
from tests.kafka_fixture import REQUIRE_ENV, services_required

MODULE = REPO / "adapters" / "ai4j"
SCHEMAS = REPO / "schemas" / "runtrail_schemas"
RUN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Adapter:
    """A built module: ``java -cp classpath dev.runtrail.ai4j.Driver MODE ARGS``."""

    classpath: str

    def run(self, *args: str, stdin: Any = None, env: dict[str, str] | None = None) -> Any:
        """The driver's JSON answer; ``env`` is added to this process's environment."""
        proc = subprocess.run(
            [*JAVA, "-cp", self.classpath, "dev.runtrail.ai4j.Driver", *args],
            input=b"" if stdin is None else json.dumps(stdin).encode(),
            capture_output=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
            env=None if env is None else {**os.environ, **env},
        )
        if proc.returncode != 0:
            raise RuntimeError(f"ai4j adapter {args[0]} failed: {proc.stderr.decode()[-3000:]}")
        return json.loads(proc.stdout)


def module_digest() -> str:
    """Hash of everything the build reads from this repository."""
    h = hashlib.sha256()
    files = [p for p in MODULE.rglob("*") if p.is_file() and "target" not in p.parts]
    files += list(SCHEMAS.glob("*.avsc"))
    for path in sorted(files):
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _maven(out: Path, offline: bool) -> subprocess.CompletedProcess[bytes]:
    cmd = ["mvn", "-q", "-B", "-DskipTests", f"-Dadapter.out={out}", "package"]
    if offline:
        cmd.insert(1, "-o")
    return subprocess.run(
        cmd, cwd=MODULE, capture_output=True, timeout=BUILD_TIMEOUT_S, check=False
    )


def build(cache_root: Path | None = None) -> Adapter:
    """The adapter for the current sources, building it if this hash was never built."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise HarnessUnavailable(f"{tool} is not on PATH")
    root = cache_root or Path(
        os.environ.get("RUNTRAIL_AI4J_CACHE", Path.home() / ".cache/runtrail/ai4j-harness")
    )
    root.mkdir(parents=True, exist_ok=True)
    out = root / f"adapter-{module_digest()}"
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
                raise RuntimeError(f"Maven build of {MODULE} failed:\n{output}")
    parts = [out / "test-classes", out / "classes"]
    return Adapter(os.pathsep.join([*map(str, parts), done.read_text().strip()]))


@cache
def _session_adapter() -> Adapter | str:
    try:
        return build()
    except HarnessUnavailable as exc:
        return str(exc)


def adapter() -> Adapter:
    """The session's adapter; skips (or fails, with ``RUNTRAIL_REQUIRE_SERVICES=1``) without it."""
    built = _session_adapter()
    if isinstance(built, str):
        message = f"no ai4j adapter: {built}"
        if services_required():
            pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(message)
    return built
