"""The command store's tables (seed 002's relational baseline), as numbered migrations.

* ``agent_event`` — primary key (tenant, run, sequence), unique (tenant, eventId): the log;
* ``agent_run_projection`` — the run's projection and its ``version`` (the last sequence);
* ``agent_command`` — accepted outcomes by (tenant, idempotency key): a duplicate gets the
  first outcome back instead of appending again;
* ``agent_outbox`` — appended events not yet on the events topic (deleted once published);
* ``agent_run_snapshot`` — the latest sealed projection snapshot of a run (a cache);
* ``agent_command_refusal`` — every refused command (migration 2), by run in the order
  refused: a refusal appends nothing to the run, yet it is what an operator needs to see.

Deviation from the seed: tenant, run and event IDs are TEXT, not uuid — runtrail's IDs are
free-form strings everywhere else (``acme``, ``run-1``). PostgreSQL keeps ``jsonb`` and
``timestamptz`` as in the seed; SQLite keeps JSON and ISO-8601 text.
"""

from __future__ import annotations

from runtrail.persistence.migrations import Component, Migration

_PG = (
    """CREATE TABLE agent_event (
        tenant_id text NOT NULL,
        run_id text NOT NULL,
        sequence bigint NOT NULL,
        event_id text NOT NULL,
        event_type text NOT NULL,
        schema_version integer NOT NULL,
        occurred_at timestamptz NOT NULL,
        recorded_at timestamptz NOT NULL DEFAULT now(),
        actor jsonb NOT NULL,
        causation_event_id text,
        correlation_id text NOT NULL,
        data jsonb NOT NULL,
        PRIMARY KEY (tenant_id, run_id, sequence),
        UNIQUE (tenant_id, event_id))""",
    """CREATE TABLE agent_run_projection (
        tenant_id text NOT NULL,
        run_id text NOT NULL,
        version bigint NOT NULL,
        status text NOT NULL,
        state jsonb NOT NULL,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (tenant_id, run_id))""",
    """CREATE TABLE agent_command (
        tenant_id text NOT NULL,
        idempotency_key text NOT NULL,
        run_id text NOT NULL,
        name text NOT NULL,
        outcome jsonb NOT NULL,
        PRIMARY KEY (tenant_id, idempotency_key))""",
    """CREATE TABLE agent_outbox (
        tenant_id text NOT NULL,
        run_id text NOT NULL,
        sequence bigint NOT NULL,
        PRIMARY KEY (tenant_id, run_id, sequence))""",
    """CREATE TABLE agent_run_snapshot (
        tenant_id text NOT NULL,
        run_id text NOT NULL,
        projector_version integer NOT NULL,
        last_applied_sequence bigint NOT NULL,
        sealed text NOT NULL,
        PRIMARY KEY (tenant_id, run_id))""",
)

_SQLITE = tuple(
    s.replace("jsonb", "TEXT")
    .replace("timestamptz", "TEXT")
    .replace(" DEFAULT now()", "")
    .replace("bigint", "INTEGER")
    for s in _PG
)

_REFUSAL_COLUMNS = """
        tenant_id text NOT NULL,
        run_id text NOT NULL,
        idempotency_key text NOT NULL,
        name text NOT NULL,
        expected_version bigint NOT NULL,
        version bigint NOT NULL,
        code text NOT NULL,
        reason text NOT NULL,
        actor {json} NOT NULL,
        refused_at {instant} NOT NULL"""
_PG_REFUSALS = (
    "CREATE TABLE agent_command_refusal (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    + _REFUSAL_COLUMNS.format(json="jsonb", instant="timestamptz")
    + ")",
    "CREATE INDEX agent_command_refusal_by_run ON agent_command_refusal (tenant_id, run_id, id)",
)
_SQLITE_REFUSALS = (
    "CREATE TABLE agent_command_refusal (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    + _REFUSAL_COLUMNS.format(json="TEXT", instant="TEXT").replace("bigint", "INTEGER")
    + ")",
    _PG_REFUSALS[1],
)

POSTGRES = Component(
    "commands",
    (
        Migration(1, "event store, projection, outbox", _PG),
        Migration(2, "refused commands", _PG_REFUSALS),
    ),
)
SQLITE = Component(
    "commands",
    (
        Migration(1, "event store, projection, outbox", _SQLITE),
        Migration(2, "refused commands", _SQLITE_REFUSALS),
    ),
)
