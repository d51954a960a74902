"""What an unfinished erasure found, kept until it finishes, so running it again deletes the same.

Why: an erasure destroys the data key before it deletes the copies (from then on no copy
opens), and a data subject's copies are found by the key's references; deleting one copy also
removes what finds another (a session's snapshot goes before its blobs). An erasure that stops
half-way (a store or the broker unreachable) could then not find what is left. So it searches
first, while the key still exists, and writes here, before destroying anything, the key's ID
and what each search found (session IDs, thread IDs); each step that finds more adds it. Run
again for the same (tenant, subject), the erasure reads the entry back: it searches by the
recorded key ID and deletes the recorded copies besides what it finds. The entry is removed
when the erasure finished (its event recorded). It holds no content and names the subject only
by its digest; the key ID and the copies' IDs are what the erasure event records anyway. It
also counts what each step did (objects deleted, copies deleted by kind), so the event a re-run
records says what the whole erasure deleted, not only its last attempt.

A finished erasure leaves a record instead (``<sha256 of subject>.erased.json``: when, the key
ID, the event's ID and the counts): erasing the same subject again while it has no new data key
finds it and does nothing (:func:`~runtrail.privacy.erasure.erase`), so an erasure is
idempotent: it says when it was done, records no second event and deletes nothing more.

The entries live beside the key store (``<key store>/erasures/<tenant>/<sha256 of subject>``,
0600 in 0700 folders): the erasure cannot start without the key store, so wherever it runs
again, the entry is there.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from runtrail.files import private_dir, write_atomic
from runtrail.sessions.naming import segment

if TYPE_CHECKING:
    from runtrail.config import Settings

FOLDER = "erasures"


@dataclass(slots=True)
class PendingErasure:
    """The key an erasure destroys and the copies it found, by kind (``sessions``, …); how
    many objects and copies (by step) the steps that finished deleted."""

    key_id: str | None
    found: dict[str, list[str]] = field(default_factory=dict)
    objects: int = 0
    copies: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FinishedErasure:
    """An erasure that finished: when (UTC, ISO 8601), the key it destroyed, the event that
    records it (None: recorded nowhere), what it deleted."""

    at: str
    key_id: str | None
    event_id: str | None = None
    objects: int = 0
    copies: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        return {
            "erasedAt": self.at,
            "keyId": self.key_id,
            "eventId": self.event_id,
            "objectsDeleted": self.objects,
            "copiesDeleted": dict(self.copies),
        }


class ErasureJournal:
    """Pending erasures as files under ``folder``, one per (tenant, subject)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, tenant: str, subject: str) -> Path:
        digest = hashlib.sha256(subject.encode()).hexdigest()
        return self.folder / segment(tenant) / f"{digest}.json"

    def load(self, tenant: str, subject: str) -> PendingErasure | None:
        """The erasure of ``subject`` that began and did not finish, if any."""
        try:
            document = orjson.loads(self.path(tenant, subject).read_bytes())
        except FileNotFoundError:
            return None
        found = {str(k): [str(i) for i in v] for k, v in dict(document["found"]).items()}
        key_id = document["keyId"]
        copies = {str(k): int(v) for k, v in dict(document.get("copies") or {}).items()}
        return PendingErasure(
            None if key_id is None else str(key_id),
            found,
            int(document.get("objects") or 0),
            copies,
        )

    def record(self, tenant: str, subject: str, pending: PendingErasure) -> None:
        """Write (durably) what the erasure found and did so far."""
        path = self.path(tenant, subject)
        private_dir(path.parent)
        document = {
            "keyId": pending.key_id,
            "found": pending.found,
            "objects": pending.objects,
            "copies": pending.copies,
        }
        write_atomic(path, orjson.dumps(document))

    def finish(self, tenant: str, subject: str, done: FinishedErasure | None = None) -> None:
        """The erasure finished: forget what it found; with ``done``, remember that it was
        done (a later erasure of the subject then finds it, :meth:`erased`)."""
        if done is not None:
            path = self.erased_path(tenant, subject)
            private_dir(path.parent)
            write_atomic(path, orjson.dumps(done.as_json()))
        self.path(tenant, subject).unlink(missing_ok=True)

    def erased_path(self, tenant: str, subject: str) -> Path:
        return self.path(tenant, subject).with_suffix(".erased.json")

    def erased(self, tenant: str, subject: str) -> FinishedErasure | None:
        """The last erasure of ``subject`` that finished, if any."""
        try:
            document = orjson.loads(self.erased_path(tenant, subject).read_bytes())
        except FileNotFoundError:
            return None
        key_id, event_id = document.get("keyId"), document.get("eventId")
        return FinishedErasure(
            str(document["erasedAt"]),
            None if key_id is None else str(key_id),
            None if event_id is None else str(event_id),
            int(document.get("objectsDeleted") or 0),
            {str(k): int(v) for k, v in dict(document.get("copiesDeleted") or {}).items()},
        )


def journal_from_settings(settings: Settings) -> ErasureJournal:
    """The journal beside the settings' key store (a store that is not a folder: the state
    folder)."""
    from urllib.parse import urlsplit

    from runtrail.persistence.urls import file_path

    url = settings.key_store_url
    if url is None:
        base = settings.state_dir / "keys"
    elif urlsplit(url).scheme == "file":
        base = file_path(url)
    else:
        base = settings.state_dir
    return ErasureJournal(base.expanduser().resolve() / FOLDER)
