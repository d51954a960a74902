"""Fresh venvs holding the built wheel and exactly the core (plus one extra), offline and fast.

Why copying instead of pip: the files of the distributions the wheel's ``Requires-Dist`` names
(with their own requirements) are copied from this venv, so a venv takes seconds, needs no
index, and holds nothing an extra does not bring: an import that works in it works for a user
who installed that extra alone. ``tests/test_extras_install.py`` does the same through the
package index from a clean clone.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def run(
    *args: str | Path, cwd: Path = ROOT, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``args`` with a minimal environment (no venv, no ``RUNTRAIL_*``), output captured."""
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=check,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), **(env or {})},
    )


def build_wheel(out: Path) -> Path:
    """The wheel of the checkout, built by the project's build backend into ``out``."""
    build = "import sys, hatchling.build as b; print(b.build_wheel(sys.argv[1]))"
    built = run(sys.executable, "-c", build, out).stdout.strip().splitlines()[-1]
    return out / built


def core_requirements(wheel: Path) -> tuple[list[Requirement], dict[str, list[Requirement]]]:
    """The wheel's core ``Requires-Dist`` and those of each extra."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        fields = Parser().parsestr(archive.read(name).decode())
    core: list[Requirement] = []
    extras: dict[str, list[Requirement]] = {e: [] for e in fields.get_all("Provides-Extra") or []}
    for line in fields.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is None or marker.evaluate({"extra": ""}):
            core.append(requirement)
        for extra in extras:
            if marker is not None and marker.evaluate({"extra": extra}):
                extras[extra].append(requirement)
    return core, extras


def closure(requirements: list[Requirement]) -> dict[str, metadata.Distribution]:
    """The installed distributions ``requirements`` (already selected) need, with their own
    requirements (selected by their markers)."""
    found: dict[str, metadata.Distribution] = {}
    todo: list[tuple[Requirement, str | None]] = [(r, None) for r in requirements]
    seen: set[tuple[str, str]] = set()
    while todo:
        requirement, extra = todo.pop()
        marker = requirement.marker
        if extra is not None and marker is not None and not marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        dist = found.setdefault(name, metadata.distribution(name))
        for wanted in ("", *sorted(requirement.extras)):
            if (name, wanted) not in seen:
                seen.add((name, wanted))
                todo += [(Requirement(r), wanted) for r in dist.requires or []]
    return found


def make_venv(venv: Path, wheel: Path, extra: str | None = None) -> Path:
    """A fresh venv holding the wheel and the files of the core distributions (plus those of
    ``extra``), nothing else."""
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(run(python, "-c", where).stdout.strip())
    core, extras = core_requirements(wheel)
    for dist in closure(core + (extras[extra] if extra else [])).values():
        for file in dist.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue  # console scripts and byte code: not needed to import
            target = site / file
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(str(dist.locate_file(file))), target)
    pip = [sys.executable, "-m", "pip", "--python", python]
    run(*pip, "install", "-q", "--no-deps", "--no-index", "--no-compile", wheel)
    return venv
