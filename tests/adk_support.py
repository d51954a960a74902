"""A venv with Google ADK, for the tests that run it as its users do.

Why a venv of its own: google-adk's requirements (google-genai's pins of ``tenacity`` and
``websockets``) conflict with versions the project lock holds, so ADK cannot join the dev install.
ADK needs no runtrail in its process (it exports OTLP to ``otlp-ingest``), so the test runs it in
a venv built from ``tests/adk/requirements.txt``, that venv's lock. The venv is built once per
content hash of that file and kept in the cache folder, as the ai4j adapter's build is.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parent / "adk" / "requirements.txt"
INSTALL_TIMEOUT_S = 900


def cache_root() -> Path:
    return Path(os.environ.get("RUNTRAIL_ADK_CACHE", Path.home() / ".cache/runtrail/adk"))


def adk_python() -> Path:
    """The Python of a venv holding exactly ``tests/adk/requirements.txt`` (built if absent)."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:16]
    venv = cache_root() / f"venv-{digest}"
    python = venv / "bin" / "python"
    if python.exists():
        return python
    cache_root().mkdir(parents=True, exist_ok=True)
    building = cache_root() / f".building-{uuid.uuid4().hex[:8]}"
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(building)],
            check=True,
            timeout=120,
        )
        uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
        assert uv, "uv is not installed (it is in the dev extra: make install)"
        target = ["--python", str(building / "bin" / "python")]
        done = subprocess.run(
            [uv, "pip", "install", "-q", *target, "-r", str(REQUIREMENTS)],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, f"installing {REQUIREMENTS.name}: {done.stderr[-3000:]}"
        try:
            building.rename(venv)  # another worker may have won: its venv is as good
        except OSError:
            if not python.exists():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return python
