"""Signed tree heads over the heads of all runs (C2SP tlog-checkpoint in a signed note).

A chain alone cannot show that its tail was cut, or that two readers were shown different
histories. So the heads of all runs are committed to, from time to time, in an RFC 6962 Merkle
tree whose root is signed; anyone holding a signed tree head and the inclusion proof of a run's
head can later hold the run's chain to it.

* **Leaf** — one per run, the RFC 8785 bytes of ``{"hash", "length", "runId", "tenantId"}``
  (``length`` a JSON integer, ``hash`` the run's last link hash, genesis for an empty run),
  e.g. ``{"hash":"9f…","length":3,"runId":"r-1","tenantId":"acme"}``; hashed as RFC 6962
  leaves, ``SHA-256(0x00 || leaf)``.
* **Order** — by tenantId, then runId, each compared as UTF-8 bytes; one leaf per run.
* **Body** — ``<origin>\\n<number of leaves>\\n<base64 root hash>\\n`` (C2SP tlog-checkpoint;
  base64 is RFC 4648 standard with padding), signed as a C2SP signed note with Ed25519.

Unlike a transparency log, this tree is a snapshot: successive tree heads are not append-only
extensions of one another (heads move as runs grow), so RFC 6962 consistency proofs do not apply
between them, and a witness that insists on them cannot cosign these tree heads.
"""

from __future__ import annotations

import base64
import binascii
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from runtrail.audit.errors import MalformedLink, NoteError
from runtrail.audit.link import RunHead
from runtrail.audit.merkle import HASH_SIZE, inclusion_proof, leaf_hash, root_hash, verify_inclusion
from runtrail.audit.note import NoteSigner, NoteVerifier, open_note, sign_note
from runtrail.camel_json import camel_fields
from runtrail.events.jsonform import canonical_bytes

DEFAULT_ORIGIN = "runtrail.local/audit"
#: The transparency log's origin (:mod:`runtrail.audit.tlog`): a tree of its own.
DEFAULT_LOG_ORIGIN = "runtrail.local/audit/log"


def head_leaf(head: RunHead) -> bytes:
    """The leaf bytes of a run head: RFC 8785 of ``{hash, length, runId, tenantId}``."""
    return canonical_bytes(head.to_json())


def _order_key(head: RunHead) -> tuple[bytes, bytes]:
    return head.tenant_id.encode(), head.run_id.encode()


def order_heads(heads: Iterable[RunHead]) -> list[RunHead]:
    """Heads in leaf order; two heads for one run are refused."""
    ordered = sorted(heads, key=_order_key)
    for before, after in itertools.pairwise(ordered):
        if _order_key(before) == _order_key(after):
            raise ValueError(f"two heads for run {after.tenant_id}/{after.run_id}")
    return ordered


def _b64_hash(text: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NoteError(f"bad base64 hash: {exc}") from exc
    if len(raw) != HASH_SIZE or base64.b64encode(raw).decode() != text:
        raise NoteError("a hash is the padded base64 of 32 bytes")
    return raw


@dataclass(frozen=True, slots=True)
class TreeHead:
    """What a signed tree head says, the run heads' or the log's (a C2SP checkpoint body): origin,
    tree size, root hash (and any extension lines)."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def body(self) -> str:
        lines = [self.origin, str(self.size), base64.b64encode(self.root_hash).decode()]
        return "\n".join([*lines, *self.extensions]) + "\n"

    @classmethod
    def parse(cls, body: str) -> TreeHead:
        if not body.endswith("\n"):
            raise NoteError("a tree head body ends with a newline")
        lines = body[:-1].split("\n")
        if len(lines) < 3:
            raise NoteError("a tree head has an origin, a size and a root hash line")
        origin, size, root, *extensions = lines
        if not origin:
            raise NoteError("empty tree head origin")
        if not (size.isascii() and size.isdigit()) or (size != "0" and size.startswith("0")):
            raise NoteError(f"tree head size {size!r} is not a decimal number")
        if any(not line for line in extensions):
            raise NoteError("empty extension line in tree head")
        return cls(origin, int(size), _b64_hash(root), tuple(extensions))


def tree_head_for(heads: Iterable[RunHead], origin: str = DEFAULT_ORIGIN) -> TreeHead:
    """The (unsigned) tree head of a set of run heads."""
    leaves = [leaf_hash(head_leaf(head)) for head in order_heads(heads)]
    return TreeHead(origin, len(leaves), root_hash(leaves))


def sign_tree_head(
    heads: Iterable[RunHead],
    signer: NoteSigner | Sequence[NoteSigner],
    origin: str = DEFAULT_ORIGIN,
) -> str:
    """The signed-note text of the tree head over ``heads``."""
    if not origin or "\n" in origin:
        raise NoteError("tree head origin must be one non-empty line")
    return sign_note(tree_head_for(heads, origin).body(), signer)


def verify_tree_head(
    note: str,
    verifier: NoteVerifier | Sequence[NoteVerifier],
    origin: str | None = None,
) -> TreeHead:
    """The tree head a note states, if a trusted key signed it (and it has ``origin``)."""
    tree_head = TreeHead.parse(open_note(note, verifier))
    if origin is not None and tree_head.origin != origin:
        raise NoteError(f"tree head origin {tree_head.origin!r} is not {origin!r}")
    return tree_head


@dataclass(frozen=True, slots=True)
class HeadProof:
    """A run head and its RFC 6962 inclusion proof in a tree of ``tree_size`` leaves."""

    head: RunHead
    leaf_index: int
    tree_size: int
    proof: tuple[bytes, ...]

    def to_json(self) -> dict[str, Any]:
        return camel_fields(
            self,
            head=self.head.to_json(),
            proof=[base64.b64encode(node).decode() for node in self.proof],
        )

    @classmethod
    def from_json(cls, obj: Any) -> HeadProof:
        if not isinstance(obj, dict) or set(obj) != {"head", "leafIndex", "treeSize", "proof"}:
            raise MalformedLink("a head proof is {head, leafIndex, treeSize, proof}")
        index, size, nodes = obj["leafIndex"], obj["treeSize"], obj["proof"]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (index, size)):
            raise MalformedLink("leafIndex and treeSize must be integers")
        if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            raise MalformedLink("proof must be a list of base64 hashes")
        try:
            proof = tuple(_b64_hash(node) for node in nodes)
        except NoteError as exc:
            raise MalformedLink(str(exc)) from exc
        return cls(RunHead.from_json(obj["head"]), index, size, proof)


def prove_head(heads: Iterable[RunHead], tenant_id: str, run_id: str) -> HeadProof:
    """The inclusion proof of run (tenant_id, run_id)'s head in the tree over ``heads``."""
    ordered = order_heads(heads)
    for position, head in enumerate(ordered):
        if (head.tenant_id, head.run_id) == (tenant_id, run_id):
            leaves = [leaf_hash(head_leaf(h)) for h in ordered]
            proof = tuple(inclusion_proof(leaves, position))
            return HeadProof(head, position, len(ordered), proof)
    raise KeyError(f"no head for run {tenant_id}/{run_id}")


def verify_head_proof(proof: HeadProof, tree_head: TreeHead) -> bool:
    """Whether the tree head's tree holds ``proof.head`` at ``proof.leaf_index``."""
    return proof.tree_size == tree_head.size and verify_inclusion(
        leaf_hash(head_leaf(proof.head)),
        proof.leaf_index,
        proof.tree_size,
        proof.proof,
        tree_head.root_hash,
    )
