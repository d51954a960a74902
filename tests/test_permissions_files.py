"""Stores, keys, spools, exports and configs are the owner's alone, whatever the umask (12.11).

Each store kind is created under umask 000 (the worst case: a process started from a shell or
container with no umask), then every file under it must be 0600 and every folder it made
0700. A signing key others can read is refused; a group-readable one only warns (the way
Kubernetes mounts a Secret for a non-root pod). The whole stack under umask 000 is covered by
``tests/test_secrets_stores_e2e.py``.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtrail.audit.errors import NoteError
from runtrail.audit.export import write_export
from runtrail.audit.keys import generate_private_key, load_private_key, write_private_key
from runtrail.persistence import AUDIT_LINKS, RESUME_ENTRIES, open_store
from runtrail.projection.store_sqlite import SqliteProjectionStore
from runtrail.publisher.wal import Wal
from runtrail_services.audit.signing import load_or_create_signer
from runtrail_tools.devstack.prometheus import scrape_config, write_config


@pytest.fixture
def no_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def modes_under(root: Path) -> dict[str, int]:
    """Mode of root and of everything below it, by path relative to root's parent."""
    found = {root.name: stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root.parent))] = stat.S_IMODE(path.stat().st_mode)
    return found


def assert_private(root: Path) -> None:
    modes = modes_under(root)
    wrong = {
        p: f"{m:04o}"
        for p, m in modes.items()
        if m != (0o700 if (root.parent / p).is_dir() else 0o600)
    }
    assert not wrong, wrong
    assert len(modes) > 1, "nothing was created"


@pytest.mark.usefixtures("no_umask")
def test_sqlite_stores_and_their_wal_files(tmp_path: Path) -> None:
    audit = open_store(AUDIT_LINKS, f"sqlite:///{tmp_path}/audit/db/audit.db")
    cache = open_store(RESUME_ENTRIES, f"sqlite:///{tmp_path}/resume/db/cache.db")
    projection = SqliteProjectionStore(tmp_path / "projection" / "db" / "projection.db")
    try:  # checked while open: SQLite removes the -wal/-shm files at the last close
        assert any(p.name.endswith("-wal") for p in (tmp_path / "audit").rglob("*"))
        for name in ("audit", "resume", "projection"):
            assert_private(tmp_path / name)
    finally:
        audit.close()
        cache.close()
        projection.close()


@pytest.mark.usefixtures("no_umask")
def test_spool_export_and_prometheus_config(tmp_path: Path) -> None:
    wal = Wal.open_for(tmp_path / "spool" / "deep", "acme", "runtrail.events")
    wal.close()
    assert_private(tmp_path / "spool")
    write_export(tmp_path / "exports" / "run.jsonl", [])
    assert_private(tmp_path / "exports")
    write_config(tmp_path / "prom" / "prometheus.yml", scrape_config({}, {}, token="t"))
    assert_private(tmp_path / "prom")


@pytest.mark.usefixtures("no_umask")
def test_a_generated_signing_key_is_private(tmp_path: Path) -> None:
    load_or_create_signer(tmp_path / "keys" / "checkpoint.key", "runtrail.test/audit")
    key_mode = stat.S_IMODE((tmp_path / "keys" / "checkpoint.key").stat().st_mode)
    assert key_mode == 0o600
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o666, 0o620, 0o601])
def test_a_key_others_can_read_or_change_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "checkpoint.key"
    write_private_key(path, generate_private_key())
    os.chmod(path, mode)
    with pytest.raises(NoteError, match=rf"{path}.*mode {mode:04o}.*chmod 600"):
        load_private_key(path)
    with pytest.raises(NoteError, match="refused"):
        load_or_create_signer(path, "runtrail.test/audit")


def test_a_group_readable_key_is_used_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "checkpoint.key"
    write_private_key(path, generate_private_key())
    os.chmod(path, 0o440)
    with caplog.at_level(logging.WARNING, logger="runtrail.audit.keys"):
        load_private_key(path)
    assert f"private key {path} has mode 0440" in caplog.text
    os.chmod(path, 0o400)
    caplog.clear()
    load_private_key(path)
    assert caplog.text == ""
