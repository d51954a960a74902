"""What only the SQLite link store has; the store contract itself (batches with offsets, no
double sealing, tampering found, checkpoints) runs on SQLite and PostgreSQL alike in
tests/test_audit_store_contract.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtrail.audit import LinkStore
from runtrail.audit.store_sqlite import SqliteLinkStore, path_from_url


def test_is_a_link_store(tmp_path: Path) -> None:
    store = SqliteLinkStore(tmp_path / "audit.db")
    typed: LinkStore = store
    assert typed.heads() == []


def test_url_paths() -> None:
    assert path_from_url("sqlite:///var/lib/runtrail/audit.db") == "/var/lib/runtrail/audit.db"
    assert path_from_url("sqlite:///:memory:") == ":memory:"
    for bad in ("postgresql://h/db", "sqlite://host/x.db", "sqlite:"):
        with pytest.raises(ValueError):
            path_from_url(bad)
