"""Erasing a subject's protected content, and the fact of it appended to the run's history.

Order matters. The stores that can tell which copies hold the erasure are searched first, while
the data key still exists, and what they found is recorded in the erasure journal
(:mod:`runtrail.privacy.erasure_journal`), so an erasure that stops half-way is finished by
running it again. Then the data key is destroyed, so from then on no copy of the ciphertext
anywhere (the topic's retention, a backup, a replica of the content store) opens; then the
objects are deleted, then the derived copies: the records of the compacted topics (tombstones,
:mod:`runtrail.privacy.topic_tombstones`), the sessions holding the erasure, found or named
(:mod:`runtrail.privacy.erased_sessions`), the LangGraph checkpoint threads holding it, found or
named (:mod:`runtrail.privacy.erased_threads`), and last a ``run.content_erased`` event is
published on the run (the caller's), so the history says who erased what and why, with no content and the subject only as a digest. The
audit chain seals that event like any other; every earlier link still verifies, because the
chain hashed the events as written, with references in place of content.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from runtrail.privacy.erasure_journal import ErasureJournal, FinishedErasure, PendingErasure
from runtrail.privacy.vault import ContentVault

if TYPE_CHECKING:
    from runtrail.audit.note import NoteSigner
    from runtrail.config import Settings

#: Deletes one kind of derived copy, given the destroyed data key's ID (None: there was no
#: key); returns how many it deleted.
CopyEraser = Callable[[str | None], int]
T = TypeVar("T")


class CopySearch(Protocol):
    """A store that tells which copies (sessions, threads) hold an erasure."""

    #: the IDs found so far (named by the caller, recorded by an earlier attempt, searched)
    found: set[str]

    def search(self, key_id: str | None) -> set[str]:
        """Add the IDs the store says hold the erasure (the run, or ``key_id``'s references)."""
        ...


class ErasureIncomplete(RuntimeError):
    """A step of an erasure failed; what it found is in the journal: running it again
    finishes it."""

    def __init__(self, step: str, cause: BaseException) -> None:
        super().__init__(f"{step}: {cause}")
        self.step = step


@dataclass(frozen=True, slots=True)
class ErasureRequest:
    tenant: str
    subject: str
    reason: str
    requested_by: str
    #: The run whose history records the erasure (the subject itself for ``--run``).
    run_id: str | None = None
    scope: str = "run"


@dataclass(slots=True)
class ErasureReport:
    key_id: str | None
    objects_deleted: int
    copies_deleted: dict[str, int] = field(default_factory=dict)
    event_id: str | None = None
    signature: str | None = None
    #: the subject was erased already (and has no data key since): nothing was done
    already_erased: FinishedErasure | None = None

    def finished(self) -> FinishedErasure:
        """What the journal keeps of this erasure once it is recorded."""
        from datetime import UTC, datetime

        return FinishedErasure(
            datetime.now(UTC).isoformat(timespec="seconds"),
            self.key_id,
            self.event_id,
            self.objects_deleted,
            dict(self.copies_deleted),
        )

    def as_json(self) -> dict[str, Any]:
        if self.already_erased is not None:
            return {"alreadyErased": True, **self.already_erased.as_json()}
        return {
            "keyId": self.key_id,
            "objectsDeleted": self.objects_deleted,
            "copiesDeleted": self.copies_deleted,
            "eventId": self.event_id,
            "signed": self.signature is not None,
        }


def subject_digest(subject: str) -> str:
    return "sha256:" + hashlib.sha256(subject.encode()).hexdigest()


def erase(
    vault: ContentVault,
    request: ErasureRequest,
    copies: Mapping[str, CopyEraser] = {},
    searches: Mapping[str, CopySearch] = {},
    journal: ErasureJournal | None = None,
) -> ErasureReport:
    """Search and record, destroy the key, delete the objects, then the copies (see the
    module doc). An unfinished erasure of the subject in ``journal`` gives the key and the
    copies it found, and what its steps deleted (counted in the report). Raises
    :class:`ErasureIncomplete` naming the step that failed; the caller
    :meth:`~ErasureJournal.finish`es the journal once the erasure is recorded.

    A subject erased already (a finished erasure in ``journal``) that has no data key since
    is not erased again: the report's ``already_erased`` says when it was, and nothing is
    searched, deleted or to be recorded (an erasure is idempotent; copies rebuilt since hold
    references that no longer open). A subject with a new data key (content sealed after the
    erasure) is erased as usual."""
    tenant, subject = request.tenant, request.subject
    pending = journal.load(tenant, subject) if journal is not None else None
    recorded = pending.key_id if pending is not None else None
    current = vault.keys.key_id_of(tenant, subject)
    if journal is not None and pending is None and current is None:
        done = journal.erased(tenant, subject)
        if done is not None:
            return ErasureReport(done.key_id, 0, already_erased=done)
    key_id = recorded or current
    report = ErasureReport(key_id, pending.objects if pending is not None else 0)
    earlier = dict(pending.copies) if pending is not None else {}

    def note() -> None:
        if journal is not None:
            found = {name: sorted(s.found) for name, s in searches.items()}
            done = {**earlier, **report.copies_deleted}
            journal.record(
                tenant, subject, PendingErasure(key_id, found, report.objects_deleted, done)
            )

    for name, search in searches.items():
        if pending is not None:
            search.found.update(pending.found.get(name, ()))
        _step(f"search {name}", partial(search.search, key_id))
    _step("journal", note)
    shredded = _step("key", partial(vault.erase, tenant, subject, key_id))
    report.key_id = shredded.key_id
    report.objects_deleted += shredded.objects
    _step("journal", note)
    for name, eraser in copies.items():
        deleted = _step(name, partial(eraser, key_id))
        report.copies_deleted[name] = earlier.get(name, 0) + deleted
        _step("journal", note)
    return report


def _step(name: str, work: Callable[[], T]) -> T:
    """``work()``; any failure as :class:`ErasureIncomplete` naming the step (a store, the
    broker, a file system: what fails is not known in advance, and each is finished by a
    re-run alike)."""
    try:
        return work()
    except Exception as exc:
        raise ErasureIncomplete(name, exc) from exc


def erasure_data(
    request: ErasureRequest, report: ErasureReport, signer: NoteSigner | None
) -> dict[str, Any]:
    """The ``run.content_erased`` payload; signed (a C2SP note over its facts) when a signer
    is given."""
    data: dict[str, Any] = {
        "scope": request.scope,
        "subjectDigest": subject_digest(request.subject),
        "keyId": report.key_id,
        "objectsDeleted": report.objects_deleted,
        "copiesDeleted": dict(report.copies_deleted),
        "reason": request.reason,
        "requestedBy": request.requested_by,
    }
    if signer is not None:
        from runtrail.audit.note import sign_note
        from runtrail.resume.canonical import canonical_json

        facts = {"tenantId": request.tenant, "runId": request.run_id, **data}
        report.signature = sign_note(canonical_json(facts).decode() + "\n", signer)
    data["signature"] = report.signature
    return data


def publish_erasure(
    settings: Settings,
    request: ErasureRequest,
    report: ErasureReport,
    signer: NoteSigner | None = None,
) -> str | None:
    """Append the erasure to the run's history, after its last event; the event's ID."""
    from runtrail.privacy.run_end import last_sequence
    from runtrail.publisher import Publisher

    if request.run_id is None:
        return None
    data = erasure_data(request, report, signer)
    last = last_sequence(settings, request.tenant, request.run_id)
    local = settings.model_copy(update={"tenant": request.tenant})
    with Publisher(local, protector=_nothing_to_protect) as publisher:
        publisher.set_next_sequence(request.run_id, last + 1)
        report.event_id = publisher.publish(
            "run.content_erased",
            request.run_id,
            data,
            actor={"kind": "operator", "id": request.requested_by},
        )
        if report.event_id is None or publisher.flush(60) != 0:
            raise RuntimeError("the erasure event was not acknowledged by the broker")
    return report.event_id


def _nothing_to_protect(form: dict[str, Any]) -> dict[str, Any]:
    """The erasure event holds no content: it is never put by reference."""
    return form
