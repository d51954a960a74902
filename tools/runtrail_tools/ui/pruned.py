"""The run page's "pruned" panel: which stores retention pruned of what was older than a
cutoff after the run started, and when.

Read from the prune log (:mod:`runtrail.privacy.prune_log`) that ``runtrail prune`` and the
services' retention timers write. Retention deletes by age, not by run, so a pass whose cutoff
is after the run's start may have taken part of the run (its capture records, sealed content,
cache entries, session snapshot): the panel names those passes, so content that reads
``[erased]`` is explained. A run started after every cutoff shows that nothing was pruned.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from runtrail.instants import utc_epoch_ms
from runtrail.privacy.prune_log import PruneFact
from runtrail_tools.cli.store_open import StoreUnreachable
from runtrail_tools.ui.markup import e
from runtrail_tools.ui.sources import Sources

#: what each store's units are, for the reader
UNITS = {
    "capture": "capture records files",
    "content": "sealed content objects",
    "sessions": "session snapshots",
    "resumeCache": "resume-cache entries",
}


def pruned_facts(sources: Sources, tenant: str, run: dict[str, Any]) -> list[PruneFact]:
    return sources.prune_log().facts(tenant, after_ms=_started_ms(run))


def pruned_panel(sources: Sources, tenant: str, run: dict[str, Any]) -> str:
    try:
        facts = pruned_facts(sources, tenant, run)
    except StoreUnreachable as exc:
        return _panel(f"<p>{e(exc)}</p>")
    if not facts:
        return _panel('<p class="dim">nothing of this run pruned by retention</p>')
    body = "".join(
        f'<tr class="prune" data-store="{e(f.store)}"><td><code>{e(f.store)}</code></td>'
        f"<td>older than {e(_at(f.cutoff_ms))}</td><td>{e(_at(f.pruned_at_ms))}</td>"
        f'<td class="count">{f.deleted} {e(UNITS.get(f.store, "units"))}</td></tr>'
        for f in facts
    )
    return _panel(
        "<p>Retention deleted what was older than these cutoffs; this run's content there "
        "reads as <code>[erased]</code>.</p>"
        "<table><tr><th>store</th><th>pruned</th><th>when</th><th>in that pass</th></tr>"
        f"{body}</table>"
    )


def _started_ms(run: dict[str, Any]) -> int:
    """When the run started (its projection's ``startedAt``); 0 when unknown: every pass may
    have touched it."""
    started = ((run.get("projection") or {}).get("startedAt")) or ""
    return utc_epoch_ms(started) or 0


def _panel(inner: str) -> str:
    return f'<section id="pruned" class="panel"><h2>Pruned</h2>{inner}</section>'


def _at(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
