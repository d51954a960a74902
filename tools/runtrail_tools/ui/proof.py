"""Can we prove it: the run's chain verified now, the latest signed checkpoint, and the run
head's inclusion proof in it — all through the audit library, as ``runtrail audit`` does.

The checkpoint's signature is checked with the audit service's public key when it can be
found (the ``.pub`` beside its signing key); the inclusion proof is checked against the root
the checkpoint states. A page never claims more than was checked: each check has its own line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtrail.audit.checkpoint import prove_head, verify_checkpoint, verify_head_proof
from runtrail.audit.store import verify_stored
from runtrail.audit.verify import ChainVerification
from runtrail_tools.ui.sources import Sources


def verify_now(sources: Sources, tenant: str, run_id: str) -> ChainVerification:
    """The chain as the store holds it, verified on this request (never a cached verdict)."""
    return verify_stored(sources.audit(), tenant, run_id)


@dataclass(frozen=True)
class CheckpointView:
    checkpoint_id: int
    created_at: str
    note: str
    #: The signed-in tenant's runs in this checkpoint (never the store-wide count).
    tenant_runs: int
    root_b64: str
    #: True/False: the signature was checked; None: no public key to check it with.
    signature_valid: bool | None
    signature_detail: str
    #: The run head's proof in this checkpoint (None: the run is not in it).
    proof: dict[str, Any] | None
    proof_valid: bool | None
    head_length: int | None


def _public_key(sources: Sources) -> tuple[Path, str] | None:
    from runtrail_services.audit.settings import AuditSettings
    from runtrail_services.audit.signing import public_key_path

    audit = AuditSettings.load()
    pub = public_key_path(audit.resolved_key_path(sources.state_dir))
    return (pub, audit.key_name) if pub.is_file() else None


def latest_checkpoint(sources: Sources, tenant: str, run_id: str) -> CheckpointView | None:
    import base64

    from runtrail.audit.errors import NoteError
    from runtrail_services.audit.trust import load_verifier

    store = sources.audit()
    stored = store.latest_checkpoint()
    if stored is None:
        return None
    checkpoint = stored.checkpoint
    signature: bool | None = None
    detail = "no public key found to check the signature with"
    key = _public_key(sources)
    if key is not None:
        try:
            verify_checkpoint(stored.note, load_verifier(*key), checkpoint.origin)
            signature, detail = True, f"signed by {key[1]} ({key[0].name})"
        except (NoteError, ValueError) as exc:
            signature, detail = False, str(exc)
    proof_json: dict[str, Any] | None = None
    proof_valid: bool | None = None
    length: int | None = None
    heads = store.checkpoint_heads(stored.checkpoint_id)
    try:
        proof = prove_head(heads, tenant, run_id)
    except KeyError:
        proof = None
    if proof is not None:
        proof_json = proof.to_json()
        proof_valid = verify_head_proof(proof, checkpoint)
        length = proof.head.length
    return CheckpointView(
        checkpoint_id=stored.checkpoint_id,
        created_at=stored.created_at,
        note=stored.note,
        tenant_runs=sum(1 for head in heads if head.tenant_id == tenant),
        root_b64=base64.b64encode(checkpoint.root_hash).decode(),
        signature_valid=signature,
        signature_detail=detail,
        proof=proof_json,
        proof_valid=proof_valid,
        head_length=length,
    )
