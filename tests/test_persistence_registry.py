"""The one store registry: every kind opens by URL scheme; a URL no adapter takes gets one
clear error naming the kind, the URL (masked) and the schemes known."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtrail.persistence import kinds
from runtrail.persistence.kinds import KINDS, StoreKind
from runtrail.persistence.registry import UnsupportedStoreUrl, open_store, opener, schemes
from runtrail.persistence.urls import MEMORY, redact_url, scheme_of, sqlite_path, sqlite_url


def test_an_unknown_scheme_names_the_kind_the_masked_url_and_the_known_schemes() -> None:
    with pytest.raises(UnsupportedStoreUrl) as caught:
        open_store(kinds.PROJECTIONS, "mysql://me:hunter2@db/x?token=abc")
    message = str(caught.value)
    assert "projection store" in message
    assert "mysql://me:***@db/x" in message
    assert "hunter2" not in message and "abc" not in message
    for known in ("sqlite://", "postgresql://", "postgres://", "memory://"):
        assert known in message


def test_a_bare_path_is_not_a_store_url() -> None:
    with pytest.raises(UnsupportedStoreUrl, match=r"not a store URL.*audit store"):
        open_store(kinds.AUDIT_LINKS, "audit.db")


def test_kinds_open_by_name_too_and_an_unknown_kind_is_refused() -> None:
    store = open_store("projection", "memory://")
    try:
        assert store.list() == []
    finally:
        store.close()
    with pytest.raises(ValueError, match=r"unknown store kind 'nope'.*projection"):
        open_store("nope", "sqlite:///x.db")


def test_every_kind_has_its_schemes() -> None:
    assert {"sqlite", "postgresql", "postgres", "memory"} <= set(schemes(kinds.PROJECTIONS))
    assert {"sqlite", "postgresql", "postgres", "memory"} <= set(schemes(kinds.AUDIT_LINKS))
    assert {"sqlite", "postgresql"} <= set(schemes(kinds.RESUME_ENTRIES))
    assert {"file", "postgresql"} <= set(schemes(kinds.SESSION_SNAPSHOTS))
    assert {"file", "postgresql"} <= set(schemes(kinds.LANGGRAPH_CHECKPOINTS))
    assert {"memory", "file", "s3", "gs", "az"} <= set(schemes(kinds.CAPTURE_RECORDS))


def test_every_kind_opens_through_the_registry(tmp_path: Path) -> None:
    sink = open_store(kinds.CAPTURE_RECORDS, "memory://")
    assert type(sink).__name__ == "InMemoryIoCaptureSink"
    sink.close()
    sessions = open_store(kinds.SESSION_SNAPSHOTS, (tmp_path / "sessions").as_uri())
    assert sessions.list() == []
    sessions.close()
    cache = open_store(kinds.RESUME_ENTRIES, sqlite_url(tmp_path / "rc.db"), readers=1)
    assert cache.entries() == []
    cache.close()


def test_every_opener_in_the_table_names_a_callable() -> None:
    for kind in KINDS.values():
        for scheme, target in kind.openers.items():
            assert callable(opener(target)), (kind.name, scheme, target)


def _factory(url: str, **options: Any) -> tuple[str, dict[str, Any]]:
    return url, options


def test_a_kind_is_data_and_options_reach_the_opener() -> None:
    kind: StoreKind[Any] = StoreKind(
        "test-kind", "test store", {"tst": "tests.test_persistence_registry:_factory"}
    )
    assert open_store(kind, "tst://here", size=3) == ("tst://here", {"size": 3})
    assert schemes(kind) == ("tst",)


def test_an_adapter_that_cannot_import_raises_its_import_error() -> None:
    kind: StoreKind[Any] = StoreKind(
        "broken-kind", "broken store", {"sqlite": "runtrail.persistence.no_such_module:x"}
    )
    with pytest.raises(ModuleNotFoundError, match=r"runtrail\.persistence\.no_such_module"):
        open_store(kind, "sqlite:///x.db")


def test_opening_one_scheme_imports_no_other_adapter() -> None:
    code = (
        "import sys\n"
        "from runtrail.persistence import PROJECTIONS, open_store\n"
        "open_store(PROJECTIONS, 'memory://').close()\n"
        "loaded = [m for m in ('runtrail.projection.store_postgres', 'psycopg') if m in sys.modules]\n"
        "assert 'runtrail.projection.store_sqlite' in sys.modules\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:secret@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgresql://u:secret@h/db?sslmode=require&password=x", "postgresql://u:***@h/db"),
        ("s3://bucket?secret_access_key=abc", "s3://bucket"),
        ("s3://bucket/prefix#frag", "s3://bucket/prefix"),
        ("sqlite:////var/x.db", "sqlite:////var/x.db"),
        ("just/a/path.db", "just/a/path.db"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_scheme_of() -> None:
    assert scheme_of("PostgreSQL://h/db") == "postgresql"
    assert scheme_of("memory://") == "memory"
    assert scheme_of("p.db") == ""
    assert scheme_of("/abs/p.db") == ""


def test_sqlite_url_names_one_file_under_either_reading(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "x.db")
    assert url == f"sqlite:///{tmp_path.resolve()}/x.db"
    assert sqlite_path(url) == str(tmp_path.resolve() / "x.db")
    assert sqlite_path(url, three_slashes="relative") == str(tmp_path.resolve() / "x.db")


def test_sqlite_path_readings() -> None:
    assert sqlite_path("sqlite:///var/x.db") == "/var/x.db"
    assert sqlite_path("sqlite:///var/x.db", three_slashes="relative") == "var/x.db"
    assert sqlite_path("sqlite:///:memory:") == MEMORY
    assert sqlite_path("sqlite://") == MEMORY
    with pytest.raises(ValueError, match="no host"):
        sqlite_path("sqlite://host/x.db")
    with pytest.raises(ValueError, match="not a sqlite"):
        sqlite_path("postgresql://h/db")
