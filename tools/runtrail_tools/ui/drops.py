"""The run page's "not recorded" panel: what OTLP ingest did not record of this run, by reason.

Read from the OTLP drops store (:mod:`runtrail.drops.store`) that receivers and mappers write;
an OTel run's ID is its trace ID, so the rows of this run ID are its trace's. A run recorded
through runtrail's own adapters has none: the panel says nothing was dropped.
"""

from __future__ import annotations

from datetime import UTC, datetime

from runtrail.drops.store import DropRow
from runtrail_tools.cli.store_open import StoreUnreachable
from runtrail_tools.ui.markup import e
from runtrail_tools.ui.sources import Sources

#: reasons that recorded the span, without something it should carry
INCOMPLETE = frozenset({"model-without-content"})


def drop_rows(sources: Sources, tenant: str, run_id: str) -> list[DropRow]:
    return sources.drops().rows(tenant=tenant, run_id=run_id)


def not_recorded_panel(sources: Sources, tenant: str, run_id: str) -> str:
    try:
        rows = drop_rows(sources, tenant, run_id)
    except StoreUnreachable as exc:
        return _panel(f"<p>{e(exc)}</p>")
    if not rows:
        return _panel('<p class="dim">nothing dropped by OTLP ingest</p>')
    body = "".join(
        f'<tr class="drop" data-reason="{e(r.reason)}">'
        f"<td><code>{e(r.reason)}</code>"
        + (' <span class="dim">(recorded incomplete)</span>' if r.reason in INCOMPLETE else "")
        + f'</td><td class="count">{r.count}</td><td>{e(r.sample)}</td>'
        f"<td>{e(_at(r.last_seen_ms))}</td></tr>"
        for r in rows
    )
    return _panel(
        "<table><tr><th>reason</th><th>spans / records</th><th>e.g.</th><th>last seen</th></tr>"
        f"{body}</table>"
    )


def _panel(inner: str) -> str:
    return f'<section id="not-recorded" class="panel"><h2>Not recorded</h2>{inner}</section>'


def _at(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
