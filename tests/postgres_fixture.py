"""pytest plugin: a real PostgreSQL server for the tests that need one.

Where the server comes from, first that works:

1. ``RUNTRAIL_TEST_POSTGRES_URL``: an existing server (a superuser URL: each test gets a fresh
   database created through it);
2. a throwaway cluster started for the session from the PostgreSQL server binaries on PATH or
   under ``/usr/lib/postgresql/<version>/bin``: ``initdb`` into a temporary folder, ``pg_ctl``
   on a free loopback port. As root both run as the ``postgres`` user (initdb refuses root).

When neither works the tests that need PostgreSQL are skipped, or fail when
``RUNTRAIL_REQUIRE_SERVICES=1`` (as in CI), so a missing server never passes for a green run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from runtrail_tools.kafka.ports import free_ports
from tests.kafka_fixture import REQUIRE_ENV, services_required

URL_ENV = "RUNTRAIL_TEST_POSTGRES_URL"
SERVER_USER = "postgres"


def postgres_unavailable(reason: str) -> NoReturn:
    """Skip the test, or fail it when services are required."""
    message = f"no PostgreSQL server for this test: {reason}"
    if services_required():
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


def server_bin_dir() -> Path | None:
    """The folder holding initdb and pg_ctl: on PATH, else the newest Debian-style install."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).parent
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for folder in candidates:
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    return None


class LocalPostgres:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (fsync off: its data lives for one session)."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.home = Path(tempfile.mkdtemp(prefix="runtrail-pg-"))
        self.data = self.home / "data"
        self.port = 0
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.home, SERVER_USER, SERVER_USER)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", SERVER_USER, "--"] if self._as_root else []
        return subprocess.run(
            [*prefix, *args], capture_output=True, text=True, timeout=120, check=False
        )

    def start(self) -> str:
        """Initialise and start the cluster; returns the superuser URL."""
        init = self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            SERVER_USER,
            "-E",
            "UTF8",
            "--no-sync",
        )
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.strip()[-500:]}")
        last = ""
        for _ in range(2):  # a free port can be taken between picking and binding: retry once
            self.port = free_ports(1)[0]
            options = (
                f"-p {self.port} -k {self.home} -c listen_addresses=127.0.0.1 "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c max_connections=200"
            )
            started = self._run(
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.home / "server.log"),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            )
            if started.returncode == 0:
                return f"postgresql://{SERVER_USER}@127.0.0.1:{self.port}/postgres"
            last = started.stderr.strip() or started.stdout.strip()
        log = self.home / "server.log"
        tail = log.read_text(errors="replace")[-800:] if log.exists() else ""
        raise RuntimeError(f"pg_ctl start failed: {last[-300:]} {tail}")

    def stop(self) -> None:
        if self.data.exists():
            self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A superuser URL of a PostgreSQL server shared by the whole test session."""
    given = os.environ.get(URL_ENV, "").strip()
    if given:
        yield given
        return
    bin_dir = server_bin_dir()
    if bin_dir is None:
        postgres_unavailable("no initdb/pg_ctl on PATH or under /usr/lib/postgresql")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        postgres_unavailable("running as root and runuser is missing (initdb refuses root)")
    server = LocalPostgres(bin_dir)
    try:
        url = server.start()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        server.stop()
        postgres_unavailable(str(exc))
    try:
        yield url
    finally:
        server.stop()


def _with_database(url: str, database: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{database}"


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database for this test (dropped afterwards)."""
    import psycopg

    name = f"rt_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        postgres_unavailable(f"cannot create a test database: {exc}")
    try:
        yield _with_database(postgres_server, name)
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
