"""Asking witnesses to cosign the log's checkpoints (C2SP tlog-witness ``add-checkpoint``).

Each witness is sent ``old <size>``, the consistency proof from that size (the last one it
cosigned for us, 0 at first) to the new checkpoint, a blank line and the signed note. It
answers 200 with its cosignature lines, or 409 with the size it really holds (after a
restart of ours, or another member's submission): the proof is then made from that size and
sent once more. A witness holding a *larger* size than the checkpoint, or refusing the proof,
has seen another history: that is logged as an error, never retried around. Cosignatures are
checked against the witness's key before they are kept.
"""

from __future__ import annotations

import base64
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from runtrail.audit.cosignature import WitnessVerifier, signature_lines
from runtrail.audit.tree_head import TreeHead

log = logging.getLogger(__name__)

#: The consistency proof from an old size to the checkpoint's.
Prover = Callable[[int], Sequence[bytes]]


class WitnessRefused(Exception):
    """The witness did not cosign (its status and answer in the message)."""


@dataclass(frozen=True)
class Witness:
    """A witness's ``add-checkpoint`` base URL and the key its cosignatures verify with."""

    url: str
    verifier: WitnessVerifier


def witnesses_from(config: Mapping[str, str]) -> list[Witness]:
    """``{base URL: witness verifier key}`` as witnesses."""
    return [Witness(url, WitnessVerifier.from_vkey(vkey)) for url, vkey in config.items()]


class WitnessClient:
    """Submits checkpoints to each witness, remembering the size each one holds."""

    def __init__(self, witnesses: Sequence[Witness], timeout_s: float = 10.0) -> None:
        self.witnesses = list(witnesses)
        self.timeout_s = timeout_s
        self._sizes: dict[str, int] = {}

    def cosign(
        self, note: str, checkpoint: TreeHead, prove: Prover, skip: Collection[str] = ()
    ) -> dict[str, str]:
        """The verified cosignature line of each witness (but those named in ``skip``) that
        cosigned, by witness name."""
        lines: dict[str, str] = {}
        for witness in self.witnesses:
            if witness.verifier.name in skip:
                continue
            try:
                lines[witness.verifier.name] = self._submit(witness, note, checkpoint, prove)
            except (WitnessRefused, OSError) as exc:
                log.error("audit: witness %s did not cosign: %s", witness.url, exc)
        return lines

    def _submit(self, witness: Witness, note: str, checkpoint: TreeHead, prove: Prover) -> str:
        old = self._sizes.get(witness.url, 0)
        for _ in range(2):
            if old > checkpoint.size:
                raise WitnessRefused(
                    f"it holds {old} leaves of this log, more than the {checkpoint.size} "
                    "being signed: it was shown another history"
                )
            status, answer = self._post(witness, _request(old, prove(old), note))
            if status == 200:
                body, _ = signature_lines(note)
                for line in answer.splitlines():
                    if witness.verifier.timestamp(line, body) is not None:
                        self._sizes[witness.url] = checkpoint.size
                        return line
                raise WitnessRefused("200 without a cosignature by its key")
            if status == 409:
                old = int(answer.strip())
                continue
            raise WitnessRefused(f"HTTP {status}: {answer.strip()[:200]}")
        raise WitnessRefused(f"still a conflict at size {old}")

    def _post(self, witness: Witness, data: bytes) -> tuple[int, str]:
        request = urllib.request.Request(
            witness.url.rstrip("/") + "/add-checkpoint", data=data, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return int(response.status), response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode("utf-8", "replace")


def _request(old: int, proof: Sequence[bytes], note: str) -> bytes:
    lines = [f"old {old}", *(base64.b64encode(node).decode() for node in proof)]
    return ("\n".join(lines) + "\n\n" + note).encode()
