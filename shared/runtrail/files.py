"""Private files and folders: stores, keys, spools and exports are the owner's alone.

Why: they hold whole agent runs (prompts, tool outputs) and signing keys. Folders are made
0700 and files 0600 whatever the umask, and a key that others can read is refused.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Any

# the source checkout this package runs from (shared/runtrail/files.py -> the checkout root):
# its deploy/ and tools/ folders hold the broker configs, alert rules and the standalone verifier
CHECKOUT_ROOT = Path(__file__).resolve().parents[2]

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and missing parents) as 0700 folders; return it.

    Existing parents are left alone (they may be shared, like /tmp); the leaf is made 0700
    when this call created it.
    """
    folder = Path(path)
    missing = []
    probe = folder
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for created in reversed(missing):
        try:
            created.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(created, PRIVATE_DIR_MODE)  # mkdir's mode is masked by the umask
    return folder


def open_private(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` that creates the file 0600 (an existing file keeps its mode)."""
    flags = os.O_CREAT | (os.O_RDWR if "+" in mode or "r" in mode else os.O_WRONLY)
    if "a" in mode:
        flags |= os.O_APPEND
    if "w" in mode:
        flags |= os.O_TRUNC
    if "x" in mode:
        flags |= os.O_EXCL
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    return os.fdopen(fd, mode, **kwargs)


def make_private(path: str | os.PathLike[str]) -> None:
    """chmod 0600 an existing file (e.g. one a library created, like a SQLite database)."""
    os.chmod(path, PRIVATE_FILE_MODE)


def readable_by_others(path: str | os.PathLike[str]) -> bool:
    """Whether group or others may read or write ``path``."""
    return bool(os.stat(path).st_mode & (stat.S_IRWXG | stat.S_IRWXO))


__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "make_private",
    "open_private",
    "private_dir",
    "readable_by_others",
]
