"""Publishing the transparency log: sign its growing tree, write its tiles, never fork it.

The tree is kept in memory and grown from the store's leaves (each read once). A new
checkpoint is signed only if it extends the largest one signed before (consistency checked
on the stored hashes, :meth:`~runtrail.audit.tlog.LogTree.checkpoint`); otherwise
:class:`~runtrail.audit.tlog.InconsistentLog` stops it, loudly. Tiles are written for what
grew since the tile store's own ``checkpoint``, then that checkpoint, last: a reader never
sees a checkpoint whose tiles are not there yet, and never a smaller one after a larger.
With witnesses configured, each checkpoint is submitted to those that have not cosigned it
(again at every publish until they do), and the published checkpoint carries every
cosignature kept; it is *witnessed* once a quorum of them cosigned.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from runtrail.audit.errors import NoteError
from runtrail.audit.log_proofs import cosigned_note
from runtrail.audit.note import NoteSigner, open_note, sign_note
from runtrail.audit.store import LinkStore, StoredTreeHead
from runtrail.audit.tile_store import TileStore
from runtrail.audit.tlog import LogTree, catch_up, new_tiles, tile_bytes
from runtrail.audit.tree_head import TreeHead
from runtrail_services.audit.witnessing import WitnessClient

log = logging.getLogger(__name__)

CHECKPOINT_OBJECT = "checkpoint"


@dataclass(eq=False)
class LogPublisher:
    """One origin's log: its tree, its signer, and the objects it publishes."""

    store: LinkStore
    signer: NoteSigner
    origin: str
    tiles: TileStore
    witnesses: WitnessClient | None = None
    quorum: int = 1
    tree: LogTree = field(default_factory=LogTree, init=False)
    #: the size the tile store is complete for (None: not read from it yet)
    _tiles_size: int | None = field(default=None, init=False)
    #: the checkpoint object last written (None: not written by this process)
    _written: str | None = field(default=None, init=False)

    def publish(self) -> StoredTreeHead | None:
        """Sign a checkpoint of the whole log if it grew, have it cosigned, and bring the
        tiles up to date; the new stored checkpoint, or None if the log did not grow."""
        catch_up(self.tree, self.store)
        latest = self.store.latest_log_checkpoint()
        previous = latest.tree_head if latest is not None else None
        checkpoint = self.tree.checkpoint(self.origin, previous)  # InconsistentLog: no fork
        signed: StoredTreeHead | None = None
        if latest is not None and previous == checkpoint:
            current = latest
        elif checkpoint.size == 0:
            return None
        else:
            note = sign_note(checkpoint.body(), self.signer)
            current = signed = self.store.save_log_checkpoint(note, checkpoint)
            log.info("audit: signed log checkpoint of %d leaves", checkpoint.size)
        self._witness(current)
        self.write_tiles(cosigned_note(self.store, current), checkpoint)
        return signed

    def witnessed(self, stored: StoredTreeHead) -> bool:
        """Whether a quorum of the configured witnesses cosigned ``stored``."""
        if self.witnesses is None:
            return False
        names = {w.verifier.name for w in self.witnesses.witnesses}
        return len(names & set(self.store.cosignatures(stored.tree_head_id))) >= self.quorum

    def _witness(self, stored: StoredTreeHead) -> None:
        """Ask the witnesses that have not cosigned ``stored`` yet; keep what they give."""
        if self.witnesses is None:
            return
        size = stored.tree_head.size
        lines = self.witnesses.cosign(
            stored.note,
            stored.tree_head,
            lambda old: self.tree.consistency_proof(old, size),
            skip=set(self.store.cosignatures(stored.tree_head_id)),
        )
        if lines:
            self.store.save_cosignatures(stored.tree_head_id, lines)

    def write_tiles(self, note: str, checkpoint: TreeHead) -> None:
        """The tiles the tile store lacks for ``checkpoint``, then the checkpoint object
        (again whenever a cosignature was added to it)."""
        done = self._published_size()
        if done > checkpoint.size or (done == checkpoint.size and note == self._written):
            return
        self.tiles.put_all(
            (tile.path, tile_bytes(self.tree, tile)) for tile in new_tiles(done, checkpoint.size)
        )
        self.tiles.put(CHECKPOINT_OBJECT, note.encode())
        self._tiles_size = checkpoint.size
        self._written = note

    def _published_size(self) -> int:
        """The size of the tile store's checkpoint if it is one of this tree's, else 0
        (everything is written again)."""
        if self._tiles_size is None:
            self._tiles_size = 0
            data = self.tiles.get(CHECKPOINT_OBJECT)
            if data is not None:
                try:
                    there = TreeHead.parse(open_note(data.decode(), self.signer.verifier))
                except (NoteError, UnicodeDecodeError):
                    there = None
                if (
                    there is not None
                    and there.origin == self.origin
                    and there.size <= self.tree.size
                    and self.tree.root(there.size) == there.root_hash
                ):
                    self._tiles_size = there.size
        return self._tiles_size
