"""Deliberate after-the-fact edits of an in-memory chain, for audit tests only (seed §5.4).

These reach into the log on purpose and never re-seal, to simulate someone editing the record
afterwards. They live here, outside :class:`~runtrail.audit.chain.HashChainedEventLog`, so that
production code has no way to call them by accident; they ship in no package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from runtrail.audit.chain import HashChainedEventLog


def tamper_event(log: HashChainedEventLog, index: int, replacement: Mapping[str, Any]) -> None:
    """Replace link ``index``'s event, keeping its stored hashes (verification must fail there)."""
    links = log._links
    links[index] = replace(links[index], event=dict(replacement), sealed_bytes=None)


def overwrite_hash(log: HashChainedEventLog, index: int, new_hash: str) -> None:
    """Replace link ``index``'s stored hash, keeping its event."""
    links = log._links
    links[index] = replace(links[index], hash=new_hash)


def delete_link(log: HashChainedEventLog, index: int) -> None:
    """Remove link ``index``; the next link's prevHash no longer matches."""
    del log._links[index]


def swap_links(log: HashChainedEventLog, first: int, second: int) -> None:
    """Exchange two links (with their stored index labels) in the chain's order."""
    links = log._links
    links[first], links[second] = links[second], links[first]
