"""Private files and folders: stores, keys, spools and exports are the owner's alone.

Why: they hold whole agent runs (prompts, tool outputs) and signing keys. Folders are made
0700 and files 0600 whatever the umask, and a key that others can read is refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import secrets
import stat
import sys
from collections.abc import Iterator
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


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make the entries of folder ``path`` durable (a file created, renamed or removed in it
    survives a power cut only once its folder is fsynced)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` so a reader sees the old content or the new, never a mix,
    whenever the writer dies: a hidden temporary file (0600) beside it, fsynced, renamed over
    it; then the folder fsynced (``sync_dir=False``: the caller does it, once for many files).
    A killed writer's temporary file is hidden (``.…tmp``) and nothing reads it."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        _write_synced(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE), data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if sync_dir:
        fsync_dir(path.parent)


def replace_via_spare(path: Path, data: bytes, spare: Path, *, sync_dir: bool = True) -> None:
    """Replace ``path`` with ``data`` as :func:`write_atomic` does (old or new, never a mix,
    whenever the writer dies), reusing one file instead of making a new one per write: the
    data goes into ``spare`` (hidden, 0600, truncated first), fsynced, then the two names are
    swapped in one step (``renameat2(RENAME_EXCHANGE)``), so ``spare`` then holds the old
    content, for the next write to reuse.

    Why: a save per session per batch otherwise makes and frees an inode each time, and ext4
    without a journal skips every recently freed inode, one by one, when it allocates the
    next: after other deletions that scan took 40 % of the sessions service's CPU samples.
    Where the swap is not possible (no ``path`` yet, or a file system or OS without it),
    ``spare`` is renamed over ``path``. Only one writer at a time may use a ``spare``
    (the caller's lock). The caller deletes ``spare`` with ``path``: it holds old content.
    A reader without that lock that is still reading the old file when the *next* write
    reuses it can get part of it: such a reader reads again when what it read fails (the
    session store's ``_settled``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    _write_synced(os.open(spare, flags, PRIVATE_FILE_MODE), data)
    if not exchange(spare, path):
        os.replace(spare, path)
    if sync_dir:
        fsync_dir(path.parent)


def _write_synced(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``, fsync it, close it (closed whatever happens)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


#: renameat2's flag and "the current folder" for its folder descriptors (linux/fcntl.h)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
#: errors meaning "no swap here": no such call or flag, a file system without it, no target
_NO_EXCHANGE = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOENT}


def exchange(first: Path, second: Path) -> bool:
    """Swap two names atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where that is
    not possible (another OS, a file system without it, ``second`` absent)."""
    call = _renameat2()
    if call is None:
        return False
    if call(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in _NO_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))


@functools.cache
def _renameat2() -> Any:
    """libc's ``renameat2`` (glibc 2.28 and later), or None; the call releases the GIL."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    call = getattr(libc, "renameat2", None)
    if call is not None:
        call.argtypes = [
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_uint,
        ]
        call.restype = ctypes.c_int
    return call


@contextlib.contextmanager
def exclusive_lock(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_file`` (created 0600): writers in other processes
    wait, so a check and the write it allows are one step between them."""
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
