"""An offline proof bundle for one run: everything an outsider needs to check it, in one file.

``{"format", "tenantId", "runId", "links", "checkpoint", "treeSize", "proofs", "keys"}``:
the run's export (JSONL text, §3 of docs/AUDIT_FORMAT.md), the latest log checkpoint with
its witnesses' cosignatures, the inclusion proof of *every* logged link of the run in that
checkpoint's tree (so an edit is pinned to the first link whose hash the log does not hold),
and the keys: the log's verifier key, the witnesses' and the quorum. The keys in a bundle
are a convenience; a verifier should be given the keys it trusts from elsewhere.
``tools/verify_audit_log.py bundle`` checks it with no network and no runtrail.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from runtrail.audit.export import export_lines
from runtrail.audit.log_proofs import NoProof, cosigned_note
from runtrail.audit.store import LinkStore
from runtrail.audit.tlog import LogTree, catch_up, inclusion_json

FORMAT = "runtrail-audit-bundle/1"


def make_bundle(
    store: LinkStore,
    tenant_id: str,
    run_id: str,
    log_vkey: str | None,
    witness_vkeys: Sequence[str] = (),
    quorum: int = 0,
) -> dict[str, Any]:
    """The bundle of run ``tenant_id``/``run_id`` against the latest log checkpoint."""
    links = store.load_chain(tenant_id, run_id)
    if not links:
        raise NoProof(f"no audit chain for {tenant_id}/{run_id}")
    stored = store.latest_log_checkpoint()
    if stored is None:
        raise NoProof("no log checkpoint signed yet")
    size = stored.tree_head.size
    tree = catch_up(LogTree(), store, size)
    proofs = []
    for link in links:
        leaf = store.log_index(tenant_id, run_id, link.index)
        if leaf is None or leaf >= size:
            break  # logged after this checkpoint: the rest is proven by a later one
        proof = inclusion_json(tree, leaf, size)
        proofs.append({"index": link.index, "leafIndex": leaf, "proof": proof["proof"]})
    return {
        "format": FORMAT,
        "tenantId": tenant_id,
        "runId": run_id,
        "links": b"".join(export_lines(links)).decode("utf-8"),
        "checkpoint": cosigned_note(store, stored),
        "treeSize": size,
        "proofs": proofs,
        "keys": {"log": log_vkey, "witnesses": list(witness_vkeys), "quorum": quorum},
    }


def bundle_text(bundle: dict[str, Any]) -> str:
    """The bundle as a file holds it: ``runtrail audit bundle`` writes these bytes, and the
    run explorer serves the same."""
    return json.dumps(bundle, ensure_ascii=False, indent=1) + "\n"
