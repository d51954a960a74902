"""The command store's tables (seed 002's relational baseline), as numbered migrations.

* ``agent_event`` — primary key (tenant, run, sequence), unique (tenant, eventId): the log;
* ``agent_run_projection`` — the run's projection and its ``version`` (the last sequence);
* ``agent_command`` — accepted outcomes by (tenant, idempotency key): a duplicate gets the
  first outcome back instead of appending again;
* ``agent_outbox`` — appended events not yet on the events topic (deleted once published);
* ``agent_run_snapshot`` — the latest sealed projection snapshot of a run (a cache).

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

POSTGRES = Component("commands", (Migration(1, "event store, projection, outbox", _PG),))
SQLITE = Component("commands", (Migration(1, "event store, projection, outbox", _SQLITE),))
