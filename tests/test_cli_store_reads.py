"""A command that only reads a store never creates, migrates or changes one; an audit command
finds the run's tenant as ``projection show`` does.

Found by a tester following docs/PROJECTOR.md and docs/AUDIT.md: from an empty folder
``projection show --run X`` and ``audit verify --run X`` made new, empty stores and answered
"not found"; ``--store sqlite:///nonexist/x.db`` made the folder; ``audit verify --store`` on the
projection store added the audit tables to it; a store made by a newer runtrail ended in a
traceback (also ``runtrail run projector``); ``audit verify|head|export|prove --run R`` without
``--tenant`` looked in tenant ``default`` only. Through the real CLI, on real SQLite files
(byte-compared before and after every refused command) and a real PostgreSQL server.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from runtrail.audit import GENESIS_HASH, seal
from runtrail.audit.store import TopicPartition
from runtrail.persistence import AUDIT_LINKS, PROJECTIONS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail.projection import ProjectionBatch
from tests.support import form
from tests.test_projection_store import state_of

RUNTRAIL = str(Path(sys.executable).with_name("runtrail"))

#: Every command that only reads (``{run}`` filled in), and the kind of store it reads.
READERS = [
    ("projection", ["projection", "show", "--run", "{run}"]),
    ("projection", ["projection", "list"]),
    ("audit", ["audit", "verify", "--run", "{run}"]),
    ("audit", ["audit", "verify", "--run", "{run}", "--tenant", "acme"]),
    ("audit", ["audit", "head", "--run", "{run}"]),
    ("audit", ["audit", "export", "--run", "{run}"]),
    ("audit", ["audit", "prove", "--run", "{run}"]),
    ("audit", ["audit", "log-prove", "--run", "{run}"]),
    ("audit", ["audit", "log-consistency", "--old", "1"]),
    ("audit", ["audit", "bundle", "--run", "{run}", "-o", "{tmp}/bundle.json"]),
]
#: The readers the tester tried (each of READERS is tried where there is no store).
TRIED = [READERS[i] for i in (0, 1, 2, 4, 5, 6)]
#: Commands that write into an audit store a service made, but never make one.
SIGNERS = [["audit", "tree-head", "--no-publish"], ["audit", "log-checkpoint"]]


def runtrail(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "RUNTRAIL_TENANT",
            "RUNTRAIL_STATE_DIR",
            "RUNTRAIL_PROJECTOR_STORE_URL",
            "RUNTRAIL_AUDIT_STORE_URL",
        )
    }
    return subprocess.run(
        [RUNTRAIL, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**clean, **(env or {})},
    )


def command(args: list[str], tmp: Path, run: str = "X") -> list[str]:
    return [a.format(run=run, tmp=tmp) for a in args]


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The refusal: exit 2, one line on stderr (JSON ``{"error"}`` for audit), no traceback."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    return str(json.loads(line)["error"]) if line.startswith("{") else line


def projection_store(url: str) -> None:
    store = open_store(PROJECTIONS, url)
    try:
        store.apply_batch(
            ProjectionBatch(
                projections=[
                    state_of("only-acme", tenant="acme"),
                    state_of("shared", tenant="acme"),
                    state_of("shared", 5, tenant="globex"),
                ]
            )
        )
    finally:
        store.close()


def audit_store(url: str) -> None:
    """Chains of ``only-acme`` (tenant acme) and ``shared`` (acme and globex)."""
    store = open_store(AUDIT_LINKS, url)
    try:
        offset = 0
        for tenant, run in (("acme", "only-acme"), ("acme", "shared"), ("globex", "shared")):
            links, prev = [], GENESIS_HASH
            for index in range(3):
                event = form(run_id=run, tenant=tenant, eventId=f"{tenant}-{run}-{index}")
                links.append(link := seal(index, prev, event))
                prev = link.hash
            offset += len(links)
            store.append_batch(links, {TopicPartition("events", 0): offset})
    finally:
        store.close()


# --- nothing is created -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "args"), READERS, ids=lambda v: "-".join(v) if isinstance(v, list) else v
)
def test_a_reading_command_makes_no_store_where_there_is_none(
    tmp_path: Path, kind: str, args: list[str]
) -> None:
    default = runtrail(tmp_path, *command(args, tmp_path))
    line = one_line(default)
    assert f"cannot open the {kind} store sqlite:///" in line, line
    assert f"{tmp_path}/.runtrail/" in line and "no SQLite database" in line, line
    url = f"sqlite:///{tmp_path}/nonexist/x.db"
    given = runtrail(tmp_path, *command(args, tmp_path), "--store", url)
    assert url in one_line(given)
    assert files(tmp_path) == {} and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", SIGNERS, ids="-".join)
def test_signing_needs_the_store_a_service_made(tmp_path: Path, args: list[str]) -> None:
    line = one_line(runtrail(tmp_path, *args))
    assert "cannot open the audit store" in line and "no SQLite database" in line, line
    assert list(tmp_path.iterdir()) == []  # not even the signing key


# --- a store of another kind, of another version ----------------------------------------------
def test_a_store_of_another_kind_is_named_and_left_as_it_was(tmp_path: Path) -> None:
    projection_url = sqlite_url(tmp_path / "projection.db")
    audit_url = sqlite_url(tmp_path / "audit.db")
    projection_store(projection_url)
    audit_store(audit_url)
    before = files(tmp_path)
    for kind, args in TRIED:
        other = projection_url if kind == "audit" else audit_url
        line = one_line(runtrail(tmp_path, *command(args, tmp_path), "--store", other))
        assert f"cannot open the {kind} store {other}" in line, line
        assert f"holds no {kind} schema" in line, line
        assert files(tmp_path) == before, args
    for args in SIGNERS:
        line = one_line(runtrail(tmp_path, *args, "--store", projection_url))
        assert "holds no audit schema" in line, line
    assert files(tmp_path) == before


def newer(path: Path, component: str) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(
            "INSERT INTO runtrail_migrations VALUES (?, 99, 'from the future', 'now')",
            (component,),
        )
        conn.commit()


def test_a_store_made_by_a_newer_runtrail_is_one_line(tmp_path: Path) -> None:
    projection_url = sqlite_url(tmp_path / "projection.db")
    audit_url = sqlite_url(tmp_path / "audit.db")
    projection_store(projection_url)
    audit_store(audit_url)
    newer(tmp_path / "projection.db", "projection")
    newer(tmp_path / "audit.db", "audit")
    before = files(tmp_path)
    for kind, args in TRIED:
        url = projection_url if kind == "projection" else audit_url
        line = one_line(runtrail(tmp_path, *command(args, tmp_path, "only-acme"), "--store", url))
        assert f"cannot open the {kind} store {url}" in line and "upgrade runtrail" in line, line
    service = runtrail(
        tmp_path,
        "run",
        "projector",
        "-o",
        f"store_url={projection_url}",
        env={
            "KAFKA_BOOTSTRAP_SERVERS": os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
        },
    )
    line = one_line(service)
    assert "projector: cannot start" in line and "upgrade runtrail" in line, line
    assert files(tmp_path) == before


def test_an_older_store_is_not_migrated_by_a_reader(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "projection.db")
    projection_store(url)
    with closing(sqlite3.connect(tmp_path / "projection.db")) as conn:
        conn.execute(
            "DELETE FROM runtrail_migrations WHERE component = 'projection' AND version = 4"
        )
        conn.commit()
    before = files(tmp_path)
    line = one_line(runtrail(tmp_path, "projection", "list", "--store", url))
    assert "older than 4" in line and "does not migrate" in line, line
    assert files(tmp_path) == before


# --- a store another process holds --------------------------------------------------------------
@contextmanager
def held(path: Path) -> Iterator[None]:
    """Another connection holds the write lock (``BEGIN EXCLUSIVE``) meanwhile."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def test_a_locked_store_is_read_without_its_write_lock_or_named(tmp_path: Path) -> None:
    projection_url = sqlite_url(tmp_path / "projection.db")
    audit_url = sqlite_url(tmp_path / "audit.db")
    projection_store(projection_url)
    audit_store(audit_url)
    with held(tmp_path / "projection.db"), held(tmp_path / "audit.db"):
        show = runtrail(
            tmp_path, "projection", "show", "--run", "only-acme", "--store", projection_url
        )
        assert show.returncode == 0, show.stderr
        verify = runtrail(tmp_path, "audit", "verify", "--run", "only-acme", "--store", audit_url)
        assert verify.returncode == 0, verify.stderr
        assert json.loads(verify.stdout)["valid"] is True
    # a store not in WAL mode cannot be read while it is held: one line, once the wait is over
    rollback = tmp_path / "rollback.db"
    projection_store(sqlite_url(rollback))
    with closing(sqlite3.connect(rollback)) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
    before = rollback.read_bytes()
    with held(rollback):
        line = one_line(runtrail(tmp_path, "projection", "list", "--store", sqlite_url(rollback)))
    assert f"cannot open the projection store {sqlite_url(rollback)}" in line, line
    assert "database is locked" in line, line
    assert rollback.read_bytes() == before


# --- the run's tenant -------------------------------------------------------------------------
def audit_reads(folder: Path, url: str, names: tuple[str, ...]) -> None:
    """``audit verify|head|export|prove`` find the tenant of the run, as ``projection show``."""
    signed = runtrail(folder, "audit", "tree-head", "--no-publish", "--store", url)
    assert signed.returncode == 0, signed.stderr
    verify = runtrail(folder, "audit", "verify", "--run", "only-acme", "--store", url)
    assert verify.returncode == 0, verify.stderr
    verdict = json.loads(verify.stdout)
    assert (verdict["valid"], verdict["length"]) == (True, 3)
    head = runtrail(folder, "audit", "head", "--run", "only-acme", "--store", url)
    assert head.returncode == 0, head.stderr
    assert json.loads(head.stdout)["tenantId"] == "acme"
    assert json.loads(head.stdout)["length"] == 3
    export = runtrail(folder, "audit", "export", "--run", "only-acme", "--store", url)
    assert export.returncode == 0, export.stderr
    assert len(export.stdout.splitlines()) == 3
    prove = runtrail(folder, "audit", "prove", "--run", "only-acme", "--store", url)
    assert prove.returncode == 0, prove.stderr
    for name in names:
        shared = runtrail(folder, "audit", name, "--run", "shared", "--store", url)
        line = one_line(shared)
        assert "run 'shared' is in several tenants ('acme', 'globex')" in line, line
        assert "--tenant" in line
        nowhere = runtrail(folder, "audit", name, "--run", "nope", "--store", url)
        assert nowhere.returncode == 1, (name, nowhere.stderr)
        assert "Traceback" not in nowhere.stderr
        assert "run 'nope' in any tenant of" in nowhere.stderr, nowhere.stderr
        assert url.split("@")[-1] in nowhere.stderr or url in nowhere.stderr, nowhere.stderr
    chosen = runtrail(
        folder, "audit", "head", "--run", "shared", "--tenant", "globex", "--store", url
    )
    assert chosen.returncode == 0 and json.loads(chosen.stdout)["tenantId"] == "globex"
    env_tenant = runtrail(
        folder,
        "audit",
        "head",
        "--run",
        "shared",
        "--store",
        url,
        env={"RUNTRAIL_TENANT": "globex"},
    )
    assert env_tenant.returncode == 0 and json.loads(env_tenant.stdout)["tenantId"] == "globex"


def test_audit_commands_find_the_tenant_of_the_run(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "audit.db")
    audit_store(url)
    audit_reads(tmp_path, url, ("verify", "head", "export", "prove"))


def test_projection_show_names_the_store_it_looked_in(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "projection.db")
    projection_store(url)
    before = files(tmp_path)
    missing = runtrail(tmp_path, "projection", "show", "--run", "nope", "--store", url)
    assert missing.returncode == 1
    assert f"no projection of run 'nope' in any tenant of the store {url}" in missing.stderr
    elsewhere = runtrail(
        tmp_path, "projection", "show", "--run", "only-acme", "--tenant", "globex", "--store", url
    )
    assert elsewhere.returncode == 1
    assert f"(it is in tenant 'acme') of the store {url}" in elsewhere.stderr
    assert files(tmp_path) == before


# --- PostgreSQL ---------------------------------------------------------------------------------
def schema_of(url: str) -> list[tuple[str, int]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT component, version FROM runtrail_migrations ORDER BY component, version"
        ).fetchall()
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
            "ORDER BY table_name"
        ).fetchall()
    return [(str(c), int(v)) for c, v in rows] + [(str(t), 0) for (t,) in tables]


def test_postgres_a_store_of_another_kind_or_version_is_left_as_it_was(
    postgres_url: str, tmp_path: Path
) -> None:
    audit_store(postgres_url)
    before = schema_of(postgres_url)
    for args in (["projection", "show", "--run", "only-acme"], ["projection", "list"]):
        line = one_line(runtrail(tmp_path, *args, "--store", postgres_url))
        assert "cannot open the projection store postgresql://" in line, line
        assert "holds no projection schema" in line, line
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO runtrail_migrations VALUES ('audit', 99, 'future', 'now')")
    before = schema_of(postgres_url)
    line = one_line(
        runtrail(tmp_path, "audit", "head", "--run", "only-acme", "--store", postgres_url)
    )
    assert "upgrade runtrail" in line, line
    assert schema_of(postgres_url) == before
    assert list(tmp_path.iterdir()) == []


def test_postgres_audit_commands_find_the_tenant_of_the_run(
    postgres_url: str, tmp_path: Path
) -> None:
    audit_store(postgres_url)
    audit_reads(tmp_path, postgres_url, ("verify", "prove"))


def test_the_held_lock_helper_really_holds(tmp_path: Path) -> None:
    """The lock ``held`` takes keeps another writer out (else the locked test proves nothing)."""
    path = tmp_path / "x.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
    refused: list[Exception] = []

    def write() -> None:
        try:
            with closing(sqlite3.connect(path, timeout=0.1)) as other:
                other.execute("INSERT INTO t VALUES (1)")
        except sqlite3.OperationalError as exc:
            refused.append(exc)

    with held(path):
        thread = threading.Thread(target=write)
        thread.start()
        thread.join()
    assert refused and "locked" in str(refused[0])


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (["erase", "--tenant", "acme", "--run", "r", "--reason", "x", "--no-topics"],
         "--sessions-store"),
        (["erase", "--tenant", "acme", "--run", "r", "--reason", "x", "--no-topics"],
         "--cache-store"),
        (["prune", "--older-than", "30"], "--sessions-store"),
        (["prune", "--older-than", "30"], "--cache-store"),
        (["prune", "--older-than", "30"], "--capture-sink"),
    ],
)  # fmt: skip
def test_a_store_named_to_erase_or_prune_from_that_does_not_exist_is_refused(
    tmp_path: Path, command: list[str], flag: str
) -> None:
    """A tester's typo in --sessions-store made an empty folder and the erasure answered
    ``"sessions": 0`` (the real snapshots were left); prune did the same for three stores.
    Refused now, naming the store, before anything is destroyed or made."""
    where = tmp_path / "typo"
    url = where.as_uri() if flag != "--cache-store" else f"sqlite:///{where}.db"
    env = {"RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri()}
    done = runtrail(tmp_path, *command, flag, url, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"the {flag} store" in done.stderr and "does not exist" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing made, no key either
