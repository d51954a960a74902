"""The compiled consume path's wheel, built once per content hash of ``shared/runtrail_native``.

``python tools/native_wheel.py`` prints the path of a wheel of ``shared/runtrail_native`` for the
running interpreter, building it (Rust, through maturin) only when no wheel of the same sources
is cached. ``.ci/run``, ``make native`` and ``./runtrail-demo`` install what it prints, so a fresh
clone of unchanged sources reuses the build instead of compiling for two minutes again.

The key covers every file of the crate but its build outputs, and the interpreter's tag and
machine: a wheel is reused only for the same sources on the same kind of Python. Stdlib only: it
runs before anything is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CRATE = ROOT / "shared" / "runtrail_native"
#: build outputs and caches inside the crate that are not its sources
IGNORED = {"target", "__pycache__", ".pytest_cache"}


def cache_dir() -> Path:
    given = os.environ.get("RUNTRAIL_NATIVE_CACHE")
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "runtrail" / "native"


def source_hash(crate: Path = CRATE) -> str:
    """sha256 over the crate's files (path and bytes, in path order) and the interpreter."""
    digest = hashlib.sha256()
    digest.update(f"{sys.implementation.cache_tag} {platform.machine()}\n".encode())
    files = sorted(
        path
        for path in crate.rglob("*")
        if path.is_file() and not IGNORED & set(path.relative_to(crate).parts)
    )
    for path in files:
        digest.update(str(path.relative_to(crate)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:24]


def cached_wheel(folder: Path) -> Path | None:
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    return wheels[0] if wheels else None


def build(folder: Path) -> Path:
    """Build the wheel into a temporary folder, then move it into ``folder`` whole."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        out = Path(scratch) / "wheel"
        print(f"native_wheel: building {CRATE.relative_to(ROOT)} (Rust, once)", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(CRATE)],
            check=True,
        )
        built = cached_wheel(out)
        if built is None:
            raise SystemExit(f"native_wheel: pip built no wheel of {CRATE}")
        staged = Path(scratch) / "done"
        staged.mkdir()
        shutil.move(str(built), staged / built.name)
        try:
            staged.rename(folder)
        except OSError:  # another build finished first: keep its wheel
            if cached_wheel(folder) is None:
                raise
    wheel = cached_wheel(folder)
    assert wheel is not None
    return wheel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hash", action="store_true", help="print the content hash only")
    args = parser.parse_args()
    key = source_hash()
    if args.hash:
        print(key)
        return 0
    folder = cache_dir() / key
    wheel = cached_wheel(folder)
    if wheel is None:
        wheel = build(folder)
    else:
        print(f"native_wheel: reusing {wheel}", file=sys.stderr)
    print(wheel)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
