"""Can we prove it: the run's chain verified now, the latest signed tree head, and the run
head's inclusion proof in it — all through the audit library, as ``runtrail audit`` does.

The tree head's signature is checked with the audit service's public key when it can be
found (the ``.pub`` beside its signing key); the inclusion proof is checked against the root
the tree head states. A page never claims more than was checked: each check has its own line,
and the inclusion of the run's head is called valid only once the chain behind that head has
verified (a head proven in a tree head says nothing for a chain broken before it).

One numbering on every page: links are numbered from 1 (row ``#N``, "INVALID at link N"); the
0-based index appears only in the API (``/links/{index}``, ``firstBrokenIndex``) and in the
rows' ``data-index``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runtrail.audit.cosignature import WitnessVerifier, witnessed_by
from runtrail.audit.note import NoteVerifier
from runtrail.audit.store import verify_stored
from runtrail.audit.tree_head import prove_head, verify_head_proof, verify_tree_head
from runtrail.audit.verify import ChainVerification
from runtrail_tools.ui.sources import Sources


def link_number(index: int) -> int:
    """The number a page shows for the link at 0-based ``index``."""
    return index + 1


def verify_now(sources: Sources, tenant: str, run_id: str) -> ChainVerification:
    """The chain as the store holds it, verified on this request (never a cached verdict)."""
    return verify_stored(sources.audit(), tenant, run_id)


@dataclass(frozen=True)
class Verdict:
    """The last verification of a run's chain by this explorer, for the runs list."""

    valid: bool
    #: Links verified (valid), or the chain's length when it broke.
    length: int
    #: The first broken link's number (1-based), when not valid.
    broken_at: int | None
    at: datetime


class Verdicts:
    """Each run's last verdict, kept in this process: the list says "verified at T" only for
    a chain this explorer verified, and "not verified" otherwise (a restart forgets)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], Verdict] = {}
        self._lock = threading.Lock()

    def record(self, tenant: str, run_id: str, result: ChainVerification) -> Verdict:
        broken = result.first_broken_index
        verdict = Verdict(
            valid=result.valid,
            length=result.length,
            broken_at=None if broken is None else link_number(broken),
            at=datetime.now(UTC),
        )
        with self._lock:
            self._last[(tenant, run_id)] = verdict
        return verdict

    def of(self, runs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Verdict]:
        with self._lock:
            return {run: self._last[run] for run in runs if run in self._last}


@dataclass(frozen=True)
class TreeHeadView:
    tree_head_id: int
    created_at: str
    note: str
    #: The signed-in tenant's runs in this tree head (never the store-wide count).
    tenant_runs: int
    root_b64: str
    #: True/False: the signature was checked; None: no public key to check it with.
    signature_valid: bool | None
    signature_detail: str
    #: The run head's proof in this tree head (None: the run is not in it).
    proof: dict[str, Any] | None
    proof_valid: bool | None
    head_length: int | None
    head_hash: str | None


def _public_key(sources: Sources) -> tuple[Path, str] | None:
    from runtrail_services.audit.settings import AuditSettings
    from runtrail_services.audit.signing import public_key_path

    audit = AuditSettings.load()
    pub = public_key_path(audit.resolved_key_path(sources.state_dir))
    return (pub, audit.key_name) if pub.is_file() else None


def latest_tree_head(sources: Sources, tenant: str, run_id: str) -> TreeHeadView | None:
    import base64

    from runtrail.audit.errors import NoteError
    from runtrail_services.audit.trust import load_verifier

    store = sources.audit()
    stored = store.latest_tree_head()
    if stored is None:
        return None
    tree_head = stored.tree_head
    signature: bool | None = None
    detail = "no public key found to check the signature with"
    key = _public_key(sources)
    if key is not None:
        try:
            verify_tree_head(stored.note, load_verifier(*key), tree_head.origin)
            signature, detail = True, f"signed by {key[1]} ({key[0].name})"
        except (NoteError, ValueError) as exc:
            signature, detail = False, str(exc)
    proof_json: dict[str, Any] | None = None
    proof_valid: bool | None = None
    length: int | None = None
    head_hash: str | None = None
    heads = store.committed_heads(stored.tree_head_id)
    try:
        proof = prove_head(heads, tenant, run_id)
    except KeyError:
        proof = None
    if proof is not None:
        proof_json = proof.to_json()
        proof_valid = verify_head_proof(proof, tree_head)
        length = proof.head.length
        head_hash = proof.head.hash
    return TreeHeadView(
        tree_head_id=stored.tree_head_id,
        created_at=stored.created_at,
        note=stored.note,
        tenant_runs=sum(1 for head in heads if head.tenant_id == tenant),
        root_b64=base64.b64encode(tree_head.root_hash).decode(),
        signature_valid=signature,
        signature_detail=detail,
        proof=proof_json,
        proof_valid=proof_valid,
        head_length=length,
        head_hash=head_hash,
    )


def inclusion_before_verify(tree_head: TreeHeadView) -> str:
    """What the panel says of the head's inclusion before the chain is verified."""
    if tree_head.proof_valid is None:
        return "run not in this tree head"
    if not tree_head.proof_valid:
        return "INVALID: the proof does not reach the tree head's root"
    return (
        f"proof checks for the head of length {tree_head.head_length}; "
        "verify the chain to rely on it"
    )


def inclusion_after_verify(
    sources: Sources, tenant: str, run_id: str, result: ChainVerification
) -> dict[str, Any]:
    """The head's inclusion in the latest tree head, judged with the chain's verdict:
    ``{"valid": true/false/null, "text": ...}`` (null: nothing to judge)."""
    tree_head = latest_tree_head(sources, tenant, run_id)
    if tree_head is None or tree_head.proof_valid is None or tree_head.head_length is None:
        return {"valid": None, "text": "run not in the latest tree head"}
    if not result.valid:
        broken = result.first_broken_index
        where = f" at link {link_number(broken)}" if broken is not None else ""
        return {
            "valid": False,
            "text": f"not valid: the chain failed verification{where}, so its committed "
            "head proves nothing",
        }
    if not tree_head.proof_valid:
        return {"valid": False, "text": "INVALID: the proof does not reach the tree head's root"}
    link = sources.audit().link_at(tenant, run_id, tree_head.head_length - 1)
    if link is None or link.hash != tree_head.head_hash:
        return {
            "valid": False,
            "text": f"INVALID: link {tree_head.head_length} of the verified chain is not the "
            "head committed to in the tree head",
        }
    return {
        "valid": True,
        "text": f"valid: the verified chain's first {tree_head.head_length} links are the head "
        f"in tree head #{tree_head.tree_head_id}",
    }


# --- the transparency log ----------------------------------------------------------------------
@dataclass(frozen=True)
class LogKeys:
    """What the explorer trusts the log with: the audit service's public key and the
    witnesses and quorum its settings name (``RUNTRAIL_AUDIT_WITNESSES`` and ``…_QUORUM``)."""

    log: NoteVerifier | None
    witnesses: list[WitnessVerifier]
    quorum: int
    #: the witnesses' keys as configured (what a bundle carries)
    witness_vkeys: list[str]


def log_keys(sources: Sources) -> LogKeys:
    from runtrail_services.audit.settings import AuditSettings
    from runtrail_services.audit.trust import load_verifier

    audit = AuditSettings.load()
    key = _public_key(sources)
    vkeys = list(audit.witnesses.values())
    return LogKeys(
        load_verifier(*key) if key is not None else None,
        [WitnessVerifier.from_vkey(v) for v in vkeys],
        audit.witness_quorum if vkeys else 0,
        vkeys,
    )


@dataclass(frozen=True)
class LogCheckpointView:
    """The latest checkpoint of the transparency log, as checked here."""

    size: int
    created_at: str
    #: the note with every cosignature the store keeps for it
    note: str
    #: True/False: the log's signature checked; None: no public key to check it with
    signature_valid: bool | None
    #: trusted witness → when it cosigned (epoch seconds), for the cosignatures that verify
    cosigned: dict[str, int]
    quorum: int
    witnesses: int
    #: the leaf of the run's last link, None when it is not in the log yet
    last_leaf: int | None
    links: int

    @property
    def witnessed(self) -> bool:
        return self.quorum > 0 and len(self.cosigned) >= self.quorum

    @property
    def run_logged(self) -> bool:
        """Every link of the run is in this checkpoint's tree."""
        return self.last_leaf is not None and self.last_leaf < self.size


def log_checkpoint(sources: Sources, tenant: str, run_id: str) -> LogCheckpointView | None:
    """The log's latest checkpoint, its signature and cosignatures checked with the trusted
    keys, and where the run's last link is in it; None before the first one."""
    from runtrail.audit.errors import NoteError
    from runtrail.audit.log_proofs import cosigned_note
    from runtrail.audit.note import open_note

    store = sources.audit()
    stored = store.latest_log_checkpoint()
    if stored is None:
        return None
    note = cosigned_note(store, stored)
    keys = log_keys(sources)
    signature: bool | None = None
    if keys.log is not None:
        try:
            open_note(note, keys.log)
            signature = True
        except NoteError:
            signature = False
    head = store.head(tenant, run_id)
    last = store.log_index(tenant, run_id, head.length - 1) if head is not None else None
    return LogCheckpointView(
        size=stored.tree_head.size,
        created_at=stored.created_at,
        note=note,
        signature_valid=signature,
        cosigned=witnessed_by(note, keys.witnesses),
        quorum=keys.quorum,
        witnesses=len(keys.witnesses),
        last_leaf=last,
        links=head.length if head is not None else 0,
    )


def bundle_bytes(sources: Sources, tenant: str, run_id: str) -> bytes:
    """The run's offline proof bundle, the bytes ``runtrail audit bundle --run`` writes
    (:class:`~runtrail.audit.log_proofs.NoProof` when there is none to make)."""
    from runtrail.audit.bundle import bundle_text, make_bundle

    keys = log_keys(sources)
    vkey = keys.log.vkey() if keys.log is not None else None
    bundle = make_bundle(sources.audit(), tenant, run_id, vkey, keys.witness_vkeys, keys.quorum)
    return bundle_text(bundle).encode("utf-8")
