"""A read command pointed at a store it cannot open says which store and why, in one line.

Found while checking issue 12 as a new user: ``projection show|list`` and ``cache
stats|get|export|import`` against a wrong database or folder ended in a psycopg/sqlite3
traceback. Now they exit 2 with ``runtrail: cannot open the <kind> store <url>: <reason>``,
the URL's password masked. Against the real PostgreSQL server (a database that does not exist)
and a real SQLite path that cannot be created.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

PASSWORD = "pw-g12-never-printed"

COMMANDS = [
    ("projection", ["projection", "list", "--store"]),
    ("projection", ["projection", "show", "--run", "r", "--store"]),
    ("resume-cache", ["cache", "stats", "--store-url"]),
    ("resume-cache", ["cache", "export", "{tmp}/out.json", "--store-url"]),
]


def runtrail(*args: str) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("runtrail"))
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)


def missing_database(server: str) -> str:
    """The server's URL with a password and a database that does not exist."""
    parts = urlsplit(server)
    netloc = f"{parts.username or 'postgres'}:{PASSWORD}@{parts.hostname}:{parts.port or 5432}"
    return urlunsplit((parts.scheme, netloc, "/rt_g12_no_such_db", parts.query, ""))


@pytest.mark.parametrize(("kind", "command"), COMMANDS)
def test_a_missing_postgres_database_is_named_without_its_password(
    postgres_server: str, tmp_path: Path, kind: str, command: list[str]
) -> None:
    url = missing_database(postgres_server)
    done = runtrail(*(a.format(tmp=tmp_path) for a in command), url)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"runtrail: cannot open the {kind} store postgresql://"), line
    assert "rt_g12_no_such_db" in line and "[REDACTED]" in line, line


@pytest.mark.parametrize(("kind", "command"), COMMANDS)
def test_an_sqlite_path_that_cannot_be_created_is_named(
    tmp_path: Path, kind: str, command: list[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    url = f"sqlite:///{blocker}/store.db"
    done = runtrail(*(a.format(tmp=tmp_path) for a in command), url)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"runtrail: cannot open the {kind} store {url}: "), line
    # each of these only reads: it never makes the file (nor its folder), so what it names is
    # the missing file (tests/test_cli_store_reads.py)
    assert "no SQLite database" in line, line
