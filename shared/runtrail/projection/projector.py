"""The projector: ``apply_event(state, event) -> state``, pure and exhaustive.

Pure: no clock, no configuration, no I/O — the same events always give the same projection
(seed 002). Exhaustive: :data:`RULES` has one row per retained (type, schema version); any
other pair raises :class:`UnknownEventVersion` and stops the run's projection rather than
being ignored. A test keeps :data:`RULES` equal to the set of retained event versions. Each
family's rows stand beside its handlers (:mod:`.run_rules`, :mod:`.effect_rules`,
:mod:`.runtime_rules`): a new version is a handler and its row there.

Order of checks for each event
  1. (type, version) has a rule, else UnknownEventVersion; the payload is of the rule's model
     (the Event validated it when it was built), else InvalidEventData.
  2. No state yet: run.accepted opens the run as ``received``; a runtime event (seed 000) opens
     a *runtime-only* run as ``executing`` (origin ``runtime``): agents that publish only
     runtime events are still projected. Any other first event is rejected.
  3. Same tenant and run as the state, else InvalidTransition.
  4. sequence <= version: already applied, the state is returned unchanged (duplicate
     delivery has no effect) — unless the sequence was recorded missing in a gap (a late
     event cannot be applied out of order: rejected) or it is the last applied sequence under
     a different eventId (a conflict: rejected).
  5. A terminal run (succeeded, failed, cancelled) rejects every later event but an erasure
     (:data:`AFTER_END_TYPES`): it never resumes.
     Its projection stays as it stood (pending intents or waits remain as evidence).
  6. The status must be one the rule allows; then the handler validates what the model
     cannot (redaction, references, timestamps) and returns the fields it changes.
  7. Bookkeeping: version = sequence, lastEventId, turnId/step when the event carries them;
     the first and latest occurredAt and the sessions, models and tools named
     (:mod:`runtrail.projection.names`: what a runs list searches).
     sequence > version + 1 is allowed and the missing range is recorded in ``gaps``.

Transition table (ACTIVE = received, planning, executing, reconciling; LIVE = ACTIVE +
awaiting_input, awaiting_approval)

  event (version)                  allowed in          status after       checks
  run.accepted (1)                 no run yet          received           first event only
  run.branched (1)                 received            unchanged          lineage kept
  run.resumed (1)                  LIVE                unchanged          counted, latest kept;
                                                                          afterSequence before it
  run.plan_proposed (1)            ACTIVE              planning           digest = stored artifact
  run.plan_validated (1)           planning            executing          = the proposed plan
  run.approval_required (1)        ACTIVE              awaiting_approval  upcast to v2, then v2
  run.approval_required (2)        ACTIVE              awaiting_approval  digest, expiresAt clear
  run.approval_granted (1)         awaiting_approval   status before wait same digest, not expired*
  run.input_required (1, 2)        ACTIVE              awaiting_input     requestId clear
  run.input_received (1, 2)        awaiting_input      status before wait same requestId
  run.state_transitioned (1)       ACTIVE              toStatus           fromStatus = status;
                                                                          toStatus ACTIVE, != from
  run.cancellation_requested (1)   LIVE                unchanged          flag set
  run.cancellation_acknowledged(1) LIVE                cancelled          a request was recorded
  run.succeeded (1)                ACTIVE              succeeded
  run.failed (1)                   LIVE                failed             terminalReason = reason
  tool.invocation_requested (1)    LIVE                unchanged          new invocationId
  tool.invocation_started (1)      LIVE                unchanged          requested, not started
  tool.invocation_succeeded (1)    LIVE                reconciling ->     pending intent, or
  tool.invocation_failed (1)       LIVE                executing when the resolves an uncertain
                                                       last uncertain is  outcome
                                                       resolved
  tool.invocation_uncertain (1)    LIVE                executing ->       pending intent
                                                       reconciling
  model.operation_completed (1)    LIVE                unchanged          tokens summed
  artifact.stored (1)              LIVE                unchanged          a digest never changes
  budget.reserved (1)              LIVE                unchanged          one unit per budget
  budget.committed / released (1)  LIVE                unchanged          reserved before
  budget.exhausted (1)             LIVE                unchanged          one unit per budget
  session.snapshot (1)             LIVE                unchanged          sequence recorded
  run.content_erased (1)           any, ended too      unchanged          erasure recorded
  MODEL_REQUEST … STEP_END (1)     LIVE or no run      unchanged          node counts, tokens

  Uncertain outcomes move ``executing``/``reconciling`` in the status, or, during a wait, in
  the status the wait returns to.
  * "not expired": the grant's occurredAt is not after the pending approval's expiresAt — both
    recorded in events, so the check is deterministic; the projector never reads a clock.

Redacted identity fields reject the event (see :mod:`runtrail.projection.redaction`).
"""

from __future__ import annotations

from typing import Any

from runtrail.events import Event
from runtrail.events.domain_events import RunAccepted
from runtrail.events.runtime_events import RUNTIME_TYPES
from runtrail.projection import effect_rules, run_rules, runtime_rules
from runtrail.projection.errors import InvalidEventData, InvalidTransition, UnknownEventVersion
from runtrail.projection.model import TERMINAL, RunProjection, SequenceGap, updated
from runtrail.projection.names import name_changes
from runtrail.projection.rule import Rule, Update

#: Bump when the projector's semantics change: snapshots of another version are not trusted.
PROJECTOR_VERSION = 2

#: (event type, schema version) -> how it applies: each family's rows, beside their handlers.
RULES: dict[tuple[str, int], Rule[Any]] = {
    **run_rules.RULES,
    **effect_rules.RULES,
    **runtime_rules.RULES,
}

#: Event types a terminal run still applies: they record facts about its history, not steps.
AFTER_END_TYPES: frozenset[str] = frozenset({"run.content_erased"})

#: Event types that may open a run that has no projection yet.
OPENING_TYPES: frozenset[str] = frozenset({"run.accepted", *RUNTIME_TYPES})

_FIELDS = frozenset(RunProjection.model_fields)


def rule_for(event: Event) -> Rule[Any]:
    """The rule of the event's (type, version), or :class:`UnknownEventVersion`."""
    rule = RULES.get((event.type, event.schema_version))
    if rule is not None:
        return rule
    known = sorted(v for t, v in RULES if t == event.type)
    detail = (
        f"no rule for version {event.schema_version} (known: {known})"
        if known
        else "unknown event type"
    )
    raise UnknownEventVersion(detail, event=event)


def apply_event(
    state: RunProjection | None, event: Event, *, in_place: bool = False
) -> RunProjection:
    """The projection after ``event``; raises a :class:`ProjectionError` instead of guessing.

    ``in_place``: ``state`` is a draft only the caller holds (the replay's fold, between two
    writes), so it is updated and returned instead of copied; the same changes either way.
    Nothing is changed when the event is refused; a duplicate returns the state as it was."""
    rule = RULES.get((event.type, event.schema_version)) or rule_for(event)
    if not isinstance(event.data, rule.model):
        raise InvalidEventData(
            f"payload is {type(event.data).__name__}, expected {rule.model.__name__}", event=event
        )
    if state is None:
        state, in_place = _open(event), True  # a new state: nothing else holds it yet
        if state.origin == "accepted":
            return _advance(state, event, {}, in_place)
    else:
        if event.run_id != state.run_id or event.tenant_id != state.tenant_id:
            _check_same_run(state, event)
        if event.sequence <= state.version:
            return _already_applied(state, event)
        if state.status in TERMINAL and event.type not in AFTER_END_TYPES:
            raise InvalidTransition(
                f"run is {state.status} (terminal at sequence {state.version}); "
                "a finished run never resumes",
                event=event,
            )
    if state.status not in rule.allowed:
        raise InvalidTransition(f"needs {rule.needs}; the run is {state.status}", event=event)
    return _advance(state, event, rule.handler(state, event, event.data), in_place)


def _open(event: Event) -> RunProjection:
    if event.type not in OPENING_TYPES:
        raise InvalidTransition(
            "a run's first event must be run.accepted (or a runtime event, for runtime-only runs)",
            event=event,
        )
    data = event.data
    accepted = isinstance(data, RunAccepted)
    return RunProjection(
        tenant_id=event.tenant_id,
        run_id=event.run_id,
        status="received" if accepted else "executing",
        version=0,
        origin="accepted" if accepted else "runtime",
        last_event_id=event.event_id,
        policy_version=data.policy_version if isinstance(data, RunAccepted) else None,
    )


def _check_same_run(state: RunProjection, event: Event) -> None:
    if (event.tenant_id, event.run_id) != (state.tenant_id, state.run_id):
        raise InvalidTransition(
            f"event of {event.tenant_id}/{event.run_id} applied to the projection of "
            f"{state.tenant_id}/{state.run_id}",
            event=event,
        )


def _already_applied(state: RunProjection, event: Event) -> RunProjection:
    seq = event.sequence
    for gap in state.gaps:
        if gap.first <= seq <= gap.last:
            raise InvalidTransition(
                f"late event: sequence {seq} was missing when {gap.last + 1} was applied; "
                "events cannot be applied out of order",
                event=event,
            )
    if seq == state.version and event.event_id != state.last_event_id:
        raise InvalidTransition(
            f"sequence {seq} was applied as event {state.last_event_id}; "
            f"{event.event_id} claims the same sequence",
            event=event,
        )
    return state


def _advance(state: RunProjection, event: Event, update: Update, in_place: bool) -> RunProjection:
    if update and not _FIELDS.issuperset(update):  # a handler bug, never data: fail loudly
        unknown = sorted(update.keys() - _FIELDS)
        raise AssertionError(f"handler of {event.type} set unknown fields {unknown}")
    seq = event.sequence
    changes = {**update, "version": seq, "last_event_id": event.event_id}
    if seq > state.version + 1:
        changes["gaps"] = (*state.gaps, SequenceGap(first=state.version + 1, last=seq - 1))
    turn_id, step = event.turn_id, event.step
    if turn_id is not None:
        changes["turn_id"] = turn_id
    if step is not None:
        changes["step"] = step
    changes.update(name_changes(state, event))
    if in_place:
        return _update_draft(state, changes)
    return updated(state, changes)


def _update_draft(draft: RunProjection, changes: dict[str, Any]) -> RunProjection:
    """``changes`` written into ``draft`` itself: what :func:`updated` would copy it with
    (its own ``__dict__`` and fields set, which :func:`updated` and the constructor never
    share), without the copy of some thirty fields per event."""
    if draft.__pydantic_extra__ is not None or draft.__pydantic_private__ is not None:
        return updated(draft, changes)
    draft.__dict__.update(changes)
    draft.__pydantic_fields_set__.update(changes)
    return draft


#: the fold's copy of a state (``model_copy`` without its generic steps; see :func:`updated`)
_updated = updated
