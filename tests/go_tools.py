"""Go programs the tests run, built once per content hash with the ``go`` on PATH.

``tools/tlogverify`` (runtrail's log checked with Go's ``golang.org/x/mod/sumdb``) is built
from this repository; ``omniwitness`` (transparency-dev's witness) is installed at a pinned
version. Both land under ``RUNTRAIL_GO_CACHE`` (default ``~/.cache/runtrail/go-tools``),
keyed by what they are built from, so a session builds at most once and parallel sessions
wait for one build. Modules come from the Go module proxy (``GOFLAGS=-mod=mod``): nothing is
vendored. Without Go the tests skip, or fail with ``RUNTRAIL_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest

from tests.kafka_fixture import REQUIRE_ENV, services_required

ROOT = Path(__file__).resolve().parent.parent
TLOGVERIFY = ROOT / "tools" / "tlogverify"
OMNIWITNESS_MODULE = "github.com/transparency-dev/witness/cmd/omniwitness"
OMNIWITNESS_VERSION = "v0.0.0-20260720115447-2e1c6971d19e"
BUILD_TIMEOUT_S = 900


class GoUnavailable(Exception):
    pass


def _cache_root() -> Path:
    root = Path(os.environ.get("RUNTRAIL_GO_CACHE", Path.home() / ".cache/runtrail/go-tools"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def _go(args: list[str], cwd: Path, env: dict[str, str]) -> None:
    go = shutil.which("go")
    if go is None:
        raise GoUnavailable("go is not on PATH")
    proc = subprocess.run(
        [go, *args],
        cwd=cwd,
        env={**os.environ, "GOFLAGS": "-mod=mod", **env},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"go {' '.join(args)} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")


def _built(name: str, digest: str, make: Callable[[Path], None]) -> Path:
    root = _cache_root()
    out = root / f"{name}-{digest[:16]}"
    binary = out / name
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.is_file():
            out.mkdir(parents=True, exist_ok=True)
            make(out)
    return binary


def build_tlogverify() -> Path:
    """``tools/tlogverify``, built for its current sources."""
    h = hashlib.sha256()
    for path in sorted(TLOGVERIFY.iterdir()):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return _built(
        "tlogverify",
        h.hexdigest(),
        lambda out: _go(["build", "-o", str(out / "tlogverify"), "."], TLOGVERIFY, {}),
    )


def install_omniwitness() -> Path:
    """transparency-dev's ``omniwitness`` at :data:`OMNIWITNESS_VERSION`."""
    spec = f"{OMNIWITNESS_MODULE}@{OMNIWITNESS_VERSION}"
    return _built(
        "omniwitness",
        hashlib.sha256(spec.encode()).hexdigest(),
        lambda out: _go(["install", spec], ROOT, {"GOBIN": str(out)}),
    )


@cache
def _session(name: str) -> Path | str:
    try:
        return {"tlogverify": build_tlogverify, "omniwitness": install_omniwitness}[name]()
    except GoUnavailable as exc:
        return str(exc)


def go_tool(name: str) -> Path:
    """The session's build of ``name``; skips (or fails, when services are required) without Go."""
    built = _session(name)
    if isinstance(built, str):
        message = f"no {name}: {built}"
        if services_required():
            pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(message)
    return built
