"""The event store: commands decided under optimistic concurrency, in one transaction each.

For every command, one transaction (seed 002, "Append events with optimistic concurrency"):

1. a command whose idempotency key was accepted before gets that first outcome back
   (``duplicate``), whatever version it carries — nothing is appended again;
2. the run's projection row is read (``FOR UPDATE`` on PostgreSQL) and its version compared
   with the one the command observed: a different one is refused as ``stale`` with the
   current version — the caller reloads and decides;
3. the command is turned into events (:mod:`.catalog`), each validated as an envelope and
   applied by the projector (:func:`runtrail.projection.apply_event`, the one transition
   table): a refusal names the projector's reason and code;
4. the next sequences are assigned, the events appended (``agent_event``) and queued for the
   relay (``agent_outbox``), the projection and its version written, a sealed snapshot kept
   every ``snapshot_every`` events, the outcome recorded under the idempotency key; commit.

Protected content (``docs/PRIVACY.md``): with a ``protector`` (the publisher's own
:class:`~runtrail.privacy.protect.ContentProtector`, built from the same settings by
:func:`~runtrail.privacy.protect.protector_from_settings`), each event's protected fields are
replaced by references in step 3, before the event is validated and applied, exactly as the
publisher does before it validates, spools and sends. So the appended events, the outbox, the
projection, the recorded outcome — and from there the topic and the audit chain — hold
references only, sealed with the data key of the policy's subject, which ``runtrail erase``
destroys. The sealed content is made durable before the events are written (the publisher
syncs it before its spool). A content store that fails refuses the command
(``protect-failed``): nothing is appended and the content never goes inline as a fallback.

PostgreSQL runs the transaction SERIALIZABLE; a serialization failure (or a concurrent insert
of the same run or key) rolls it back and the whole transaction is run again from step 1, up to
``max_attempts`` times. SQLite takes the write lock at ``BEGIN IMMEDIATE``, so writers queue.
Accepted outcomes are recorded under their idempotency key; a refused command had no effect
and may be sent again, and each refusal is kept apart (``agent_command_refusal``), in the same
transaction, so the run's page can show what was refused and why.

Model and tool calls never run inside this transaction: append an intent, commit, act, then
append the outcome (seed 002).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from runtrail.commands import catalog
from runtrail.commands.model import Command, CommandOutcome, CommandRefusal
from runtrail.commands.schema import POSTGRES, SQLITE
from runtrail.events import EventError, upcast, validate_json_form
from runtrail.events.models import Event
from runtrail.persistence.dialect import Database
from runtrail.persistence.tracking import TRACKING, Tracking
from runtrail.privacy.protect import Durable, ProtectFailed, Protector
from runtrail.projection.errors import ProjectionError
from runtrail.projection.model import RunProjection
from runtrail.projection.projector import PROJECTOR_VERSION, apply_event
from runtrail.projection.snapshot import ProjectionSnapshot, open_sealed, take_snapshot
from runtrail.runtime.unavailable import StoreUnavailable

JsonDict = dict[str, Any]
RunKey = tuple[str, str]
#: The protected data of the events a command sealed content for, by (event ID, data as JSON):
#: a retried transaction reuses their references instead of sealing the same content again.
_Protected = dict[tuple[str, bytes], JsonDict]
#: An outbox entry: (tenant ID, run ID, sequence, event ID).
OutboxKey = tuple[str, str, int, str]

#: The tracking-table component under which the relay keeps its topic positions.
RELAY_COMPONENT = "outbox-relay"
#: Namespace of the deterministic event IDs (uuid5 of tenant, idempotency key and index).
EVENT_ID_NAMESPACE = uuid.UUID("6f1f3f0e-6b1e-4f43-9d1a-2a7c8e0b5c11")

_REFUSAL_COLUMNS = (
    "tenant_id, run_id, idempotency_key, name, expected_version, version, code, reason, actor, "
    "refused_at"
)
_EVENT_COLUMNS = (
    "tenant_id, run_id, sequence, event_id, event_type, schema_version, occurred_at, "
    "recorded_at, actor, causation_event_id, correlation_id, data"
)


#: serialization_failure, deadlock_detected, unique_violation (a concurrent insert of the same
#: run, key or event): the transaction is run again from the start.
_RETRY_SQLSTATES = frozenset({"40001", "40P01", "23505"})


def format_instant(moment: datetime) -> str:
    """The one text form of the store's timestamps (UTC, microseconds, ``Z``): it survives a
    round trip through ``timestamptz`` unchanged, so an event reads back exactly as written."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utcnow() -> datetime:
    return datetime.now(UTC)


class _Raced(Exception):
    """Another transaction changed the run between our read and our write: run again."""


class EventStore:
    """Commands, events, projections and the outbox on one SQLite or PostgreSQL database."""

    def __init__(
        self,
        db: Database,
        *,
        snapshot_every: int = 50,
        max_attempts: int = 30,
        clock: Callable[[], datetime] = _utcnow,
        protector: Protector | None = None,
    ) -> None:
        """``protector``: replaces the protected fields of every event by references before
        it is validated and written (None: no content store, events are kept as given)."""
        self.db = db
        self.protector = protector
        self.dialect = db.dialect
        self.snapshot_every = snapshot_every
        self.max_attempts = max_attempts
        self._clock = clock
        self._pg = db.dialect == "postgresql"
        self._tracking = Tracking(RELAY_COMPONENT, db.dialect)
        db.migrate([TRACKING, POSTGRES if self._pg else SQLITE])

    # --- SQL helpers ---------------------------------------------------------------------------
    def _sql(self, statement: str) -> str:
        if not self._pg:
            return statement.replace("{json}", "?").replace("{lock}", "")
        return (
            statement.replace("?", "%s")
            .replace("{json}", "%s::jsonb")
            .replace("{lock}", " FOR UPDATE")
        )

    @staticmethod
    def _json_in(value: Any) -> str:
        return orjson.dumps(value).decode()

    @staticmethod
    def _json_out(value: Any) -> Any:
        return orjson.loads(value) if isinstance(value, str | bytes) else value

    @staticmethod
    def _instant_out(value: Any) -> str:
        return format_instant(value) if isinstance(value, datetime) else str(value)

    def _now(self) -> str:
        return format_instant(self._clock())

    # --- commands ------------------------------------------------------------------------------
    def execute(self, command: Command) -> CommandOutcome:
        """Decide ``command`` (see the module docstring); never raises for a refusal."""
        last: Exception | None = None
        protected: _Protected = {}
        for _ in range(self.max_attempts):
            try:
                with self.db.transaction() as cur:
                    if self._pg:
                        cur.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                    outcome = self._decide(cur, command, protected)
                    if not outcome.accepted:
                        self._keep_refusal(cur, command, outcome)
                    return outcome
            except Exception as exc:
                if not self._retryable(exc):
                    raise
                last = exc
        raise StoreUnavailable(
            "command event store",
            f"{command.name} on {command.run_id}: still conflicting after "
            f"{self.max_attempts} attempts ({last})",
        )

    def _retryable(self, exc: Exception) -> bool:
        if isinstance(exc, _Raced):
            return True
        if not self._pg:
            return False
        cause = exc.__cause__ if isinstance(exc, StoreUnavailable) else exc
        return getattr(cause, "sqlstate", None) in _RETRY_SQLSTATES

    def _protect(self, form: JsonDict, protected: _Protected) -> JsonDict:
        """``form`` with its protected fields by reference (the publisher's hook; the form
        itself when nothing is protected). Raises :class:`ProtectFailed`."""
        if self.protector is None:
            return form
        memo = (str(form["eventId"]), orjson.dumps(form["data"], option=orjson.OPT_SORT_KEYS))
        earlier = protected.get(memo)
        if earlier is not None:
            return {**form, "data": earlier}
        result = self.protector(form)
        if result is not form:  # something was sealed: keep it for a retry, sync it later
            protected[memo] = result["data"]
        return result

    def _decide(self, cur: Any, command: Command, protected: _Protected) -> CommandOutcome:
        tenant, run = command.tenant_id, command.run_id
        first = cur.execute(
            self._sql(
                "SELECT run_id, name, outcome FROM agent_command "
                "WHERE tenant_id = ? AND idempotency_key = ?"
            ),
            (tenant, command.idempotency_key),
        ).fetchone()
        if first is not None:
            if (first[0], first[1]) != (run, command.name):
                version, _ = self._read(cur, tenant, run, lock=False)
                return _refused(
                    "idempotency-conflict",
                    f"idempotency key {command.idempotency_key!r} was used by {first[1]} on "
                    f"run {first[0]}",
                    version,
                )
            outcome = CommandOutcome.model_validate(self._json_out(first[2]))
            return outcome.model_copy(update={"duplicate": True})
        version, state = self._read(cur, tenant, run, lock=True)
        if command.expected_version != version:
            return _refused(
                "stale",
                f"the command observed version {command.expected_version} but the run is at "
                f"version {version}: reload the run and decide again",
                version,
            )
        if state is not None and state.terminal:
            return _refused(
                "run-terminal",
                f"run is {state.status} (terminal at version {version}): it takes no command",
                version,
            )
        try:
            drafts = catalog.drafts(command.name, state, command.data)
        except catalog.CommandRejected as exc:
            return _refused(exc.code, exc.reason, version)
        now = format_instant(self._clock())
        events: list[Event] = []
        new_state = state
        for index, draft in enumerate(drafts):
            form = {
                "eventId": str(
                    uuid.uuid5(
                        EVENT_ID_NAMESPACE, f"{tenant}\x00{command.idempotency_key}\x00{index}"
                    )
                ),
                "runId": run,
                "tenantId": tenant,
                "sequence": str(version + 1 + index),
                "type": draft.type,
                "schemaVersion": draft.version,
                "occurredAt": now,
                "recordedAt": now,
                "actor": command.actor.model_dump(mode="json"),
                "causationEventId": command.causation_event_id,
                "correlationId": command.correlation_id or run,
                "data": draft.data,
            }
            try:
                event = validate_json_form(self._protect(form, protected))
                new_state = apply_event(new_state, event)
            except ProtectFailed as exc:
                return _refused("protect-failed", f"{command.name}: {exc}", version)
            except EventError as exc:
                return _refused("invalid-command", f"{command.name}: {exc}", version)
            except ProjectionError as exc:
                return _refused(exc.code, str(exc), version)
            events.append(event)
        assert new_state is not None
        if protected and isinstance(self.protector, Durable):
            try:  # the content before the events that refer to it, as the publisher does
                self.protector.sync()
            except Exception as exc:
                reason = f"{command.name}: the content store cannot make the content durable: "
                return _refused("protect-failed", f"{reason}{type(exc).__name__}: {exc}", version)
        for event in events:
            self._append(cur, event)
        self._write_projection(cur, state, new_state, version)
        if new_state.version // self.snapshot_every > version // self.snapshot_every:
            self._write_snapshot(cur, take_snapshot(new_state))
        outcome = CommandOutcome(
            accepted=True,
            code="accepted",
            version=new_state.version,
            events=[e.json_form() for e in events],
        )
        cur.execute(
            self._sql(
                "INSERT INTO agent_command (tenant_id, idempotency_key, run_id, name, outcome) "
                "VALUES (?, ?, ?, ?, {json})"
            ),
            (
                tenant,
                command.idempotency_key,
                run,
                command.name,
                outcome.model_dump_json(by_alias=True),
            ),
        )
        return outcome

    def _keep_refusal(self, cur: Any, command: Command, outcome: CommandOutcome) -> None:
        cur.execute(
            self._sql(
                f"INSERT INTO agent_command_refusal ({_REFUSAL_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, {json}, ?)"
            ),
            (
                command.tenant_id,
                command.run_id,
                command.idempotency_key,
                command.name,
                command.expected_version,
                outcome.version,
                outcome.code,
                outcome.reason or "",
                self._json_in(command.actor.model_dump(mode="json")),
                self._now(),
            ),
        )

    def refusals(self, tenant: str, run: str, limit: int = 100) -> list[CommandRefusal]:
        """The run's latest ``limit`` refused commands, oldest first."""
        rows = self.db.query(
            self._sql(
                f"SELECT {_REFUSAL_COLUMNS} FROM agent_command_refusal "
                "WHERE tenant_id = ? AND run_id = ? ORDER BY id DESC LIMIT ?"
            ),
            (tenant, run, limit),
        )
        return [
            CommandRefusal(
                name=str(name),
                idempotency_key=str(key),
                expected_version=int(expected),
                version=int(version),
                code=code,
                reason=str(reason),
                actor=self._json_out(actor),
                refused_at=self._instant_out(refused_at),
            )
            for _, _, key, name, expected, version, code, reason, actor, refused_at in reversed(
                rows
            )
        ]

    def _read(
        self, cur: Any, tenant: str, run: str, *, lock: bool
    ) -> tuple[int, RunProjection | None]:
        statement = (
            "SELECT version, state FROM agent_run_projection WHERE tenant_id = ? AND run_id = ?"
        )
        row = cur.execute(
            self._sql(statement + ("{lock}" if lock else "")), (tenant, run)
        ).fetchone()
        if row is None:
            return 0, None
        return int(row[0]), RunProjection.model_validate(self._json_out(row[1]))

    def _append(self, cur: Any, event: Event) -> None:
        form = event.json_form()
        cur.execute(
            self._sql(
                f"INSERT INTO agent_event ({_EVENT_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, {json}, ?, ?, {json})"
            ),
            (
                event.tenant_id,
                event.run_id,
                event.sequence,
                event.event_id,
                event.type,
                event.schema_version,
                event.occurred_at,
                event.recorded_at,
                self._json_in(form["actor"]),
                event.causation_event_id,
                event.correlation_id,
                self._json_in(form["data"]),
            ),
        )
        cur.execute(
            self._sql("INSERT INTO agent_outbox (tenant_id, run_id, sequence) VALUES (?, ?, ?)"),
            (event.tenant_id, event.run_id, event.sequence),
        )

    def _write_projection(
        self, cur: Any, before: RunProjection | None, after: RunProjection, version: int
    ) -> None:
        state = self._json_in(after.json_form())
        if before is None:
            cur.execute(
                self._sql(
                    "INSERT INTO agent_run_projection (tenant_id, run_id, version, status, state, "
                    "updated_at) VALUES (?, ?, ?, ?, {json}, ?)"
                ),
                (
                    after.tenant_id,
                    after.run_id,
                    after.version,
                    after.status,
                    state,
                    self._now(),
                ),
            )
            return
        cur.execute(
            self._sql(
                "UPDATE agent_run_projection SET version = ?, status = ?, state = {json}, "
                "updated_at = ? WHERE tenant_id = ? AND run_id = ? AND version = ?"
            ),
            (
                after.version,
                after.status,
                state,
                self._now(),
                after.tenant_id,
                after.run_id,
                version,
            ),
        )
        if cur.rowcount != 1:
            raise _Raced()

    def _write_snapshot(self, cur: Any, snapshot: ProjectionSnapshot) -> None:
        cur.execute(
            self._sql(
                "INSERT INTO agent_run_snapshot (tenant_id, run_id, projector_version, "
                "last_applied_sequence, sealed) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (tenant_id, run_id) DO UPDATE SET "
                "projector_version = excluded.projector_version, "
                "last_applied_sequence = excluded.last_applied_sequence, sealed = excluded.sealed"
            ),
            (
                snapshot.state.tenant_id,
                snapshot.state.run_id,
                snapshot.projector_version,
                snapshot.last_applied_sequence,
                snapshot.sealed(),
            ),
        )

    # --- reads ---------------------------------------------------------------------------------
    def load(self, tenant: str, run: str) -> tuple[int, RunProjection | None]:
        """The run's version (0: no such run) and projection, as the last command left them."""
        rows = self.db.query(
            self._sql(
                "SELECT version, state FROM agent_run_projection WHERE tenant_id = ? AND run_id = ?"
            ),
            (tenant, run),
        )
        if not rows:
            return 0, None
        return int(rows[0][0]), RunProjection.model_validate(self._json_out(rows[0][1]))

    def stored_events(self, tenant: str, run: str, after: int = 0) -> list[JsonDict]:
        """The run's events after sequence ``after``, in order, as written (writer version)."""
        rows = self.db.query(
            self._sql(
                f"SELECT {_EVENT_COLUMNS} FROM agent_event WHERE tenant_id = ? AND run_id = ? "
                "AND sequence > ? ORDER BY sequence"
            ),
            (tenant, run, after),
        )
        return [self._form(row) for row in rows]

    def events(self, tenant: str, run: str, after: int = 0) -> list[Event]:
        """The run's events after ``after``, upcast to the current versions and validated."""
        return [validate_json_form(upcast(form)) for form in self.stored_events(tenant, run, after)]

    def _form(self, row: tuple[Any, ...]) -> JsonDict:
        tenant, run, seq, event_id, etype, version, occurred, recorded, actor, cause, corr, data = (
            row
        )
        return {
            "eventId": str(event_id),
            "runId": str(run),
            "tenantId": str(tenant),
            "sequence": str(seq),
            "type": str(etype),
            "schemaVersion": int(version),
            "occurredAt": self._instant_out(occurred),
            "recordedAt": self._instant_out(recorded),
            "actor": self._json_out(actor),
            "causationEventId": cause,
            "correlationId": str(corr),
            "sessionId": None,
            "turnId": None,
            "step": None,
            "data": self._json_out(data),
        }

    def latest_snapshot(self, tenant: str, run: str) -> ProjectionSnapshot | None:
        """The run's stored snapshot, verified (digest, projector version, sequence); raises
        :class:`~runtrail.projection.errors.SnapshotMismatch` for one that cannot be trusted."""
        rows = self.db.query(
            self._sql(
                "SELECT projector_version, last_applied_sequence, sealed FROM agent_run_snapshot "
                "WHERE tenant_id = ? AND run_id = ?"
            ),
            (tenant, run),
        )
        if not rows:
            return None
        version, sequence, sealed = rows[0]
        return open_sealed(tenant, run, int(version), int(sequence), sealed)

    def runs(self, tenant: str | None = None) -> list[RunKey]:
        """Every (tenant, run) the store holds, or a tenant's."""
        statement = "SELECT tenant_id, run_id FROM agent_run_projection"
        params: tuple[Any, ...] = ()
        if tenant is not None:
            statement += " WHERE tenant_id = ?"
            params = (tenant,)
        return [
            (str(t), str(r))
            for t, r in self.db.query(self._sql(statement + " ORDER BY 1, 2"), params)
        ]

    # --- outbox --------------------------------------------------------------------------------
    def outbox_batch(self, limit: int) -> list[JsonDict]:
        """Up to ``limit`` unpublished events, each run's in sequence order (as written)."""
        rows = self.db.query(
            self._sql(
                f"SELECT {', '.join('e.' + c.strip() for c in _EVENT_COLUMNS.split(','))} "
                "FROM agent_outbox o JOIN agent_event e ON e.tenant_id = o.tenant_id "
                "AND e.run_id = o.run_id AND e.sequence = o.sequence "
                "ORDER BY o.tenant_id, o.run_id, o.sequence LIMIT ?"
            ),
            (limit,),
        )
        return [self._form(row) for row in rows]

    def outbox_size(self) -> int:
        return int(self.db.query("SELECT COUNT(*) FROM agent_outbox")[0][0])

    def mark_published(
        self, published: Iterable[OutboxKey], offsets: Mapping[tuple[str, int], int]
    ) -> None:
        """Drop published events from the outbox and record the relay's topic positions, in one
        transaction (positions never move back: see :mod:`runtrail.persistence.tracking`). An
        event leaves the outbox only if its eventId is the stored one at that sequence."""
        delete = self._sql(
            "DELETE FROM agent_outbox WHERE tenant_id = ? AND run_id = ? AND sequence = ? "
            "AND EXISTS (SELECT 1 FROM agent_event e WHERE e.tenant_id = agent_outbox.tenant_id "
            "AND e.run_id = agent_outbox.run_id AND e.sequence = agent_outbox.sequence "
            "AND e.event_id = ?)"
        )
        with self.db.transaction() as cur:
            for key in published:
                cur.execute(delete, key)
            self._tracking.record(cur, offsets)

    def relay_offsets(self, topic: str) -> dict[int, int]:
        """The relay's recorded next offset per partition of ``topic``."""
        with self.db.transaction() as cur:
            return self._tracking.read(cur, topic)

    def close(self) -> None:
        self.db.close()


def _refused(code: Any, reason: str, version: int) -> CommandOutcome:
    return CommandOutcome(accepted=False, code=code, version=version, reason=reason)


__all__ = ["PROJECTOR_VERSION", "EventStore", "format_instant"]
