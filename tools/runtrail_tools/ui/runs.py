"""The runs list of one tenant: a page of projection rows, with times and audit state.

Paging is by keyset (the last run ID of the page), so page N costs what page 1 costs whatever
the tenant's size. Per page the audit store is read in one batch for the heads, and one
primary-key read per run for its first and last link (start time and last update).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from runtrail.events.domain_events import RunStatus
from runtrail.projection.store import StoredProjection
from runtrail_tools.ui.proof import Verdict, Verdicts
from runtrail_tools.ui.sources import Sources
from runtrail_tools.ui.times import event_time, seconds, short

#: The status filter's choices (``halted`` is the halt flag, not a status).
STATUSES: tuple[str, ...] = (*get_args(RunStatus), "halted")


@dataclass(frozen=True)
class RunRow:
    """One line of the list."""

    run_id: str
    status: str
    halted: bool
    halt_reason: str | None
    version: int
    last_update: str
    duration_s: float | None
    tokens_in: int
    tokens_out: int
    model_nodes: int
    tool_nodes: int
    retries: int
    #: ``sealed`` (every applied event has a link), ``behind`` (fewer links), ``none``.
    audit_state: str
    audit_links: int
    #: This explorer's last verification of the chain (None: not verified).
    verdict: Verdict | None


@dataclass(frozen=True)
class RunPage:
    rows: list[RunRow]
    #: The cursor of the next page (None: this is the last one).
    next_after: str | None


def _tokens(row: StoredProjection) -> tuple[int, int]:
    state = row.state
    if state is None:
        return 0, 0
    # domain usage events and raw runtime usage are kept apart (never both counted)
    tokens = state.tokens if (state.tokens.input_tokens or state.tokens.output_tokens) else None
    chosen = tokens or state.runtime_tokens
    return chosen.input_tokens, chosen.output_tokens


def list_runs(
    sources: Sources,
    tenant: str,
    *,
    status: str | None = None,
    run_id: str | None = None,
    after: str | None = None,
    limit: int = 50,
    verdicts: Verdicts | None = None,
) -> RunPage:
    """A page of ``tenant``'s runs (filtered by status, or one run by ID) after ``after``."""
    halted = True if status == "halted" else None
    wanted = None if status in (None, "", "halted") else status
    rows = sources.projections().list(
        wanted, tenant, halted=halted, limit=limit + 1, run_id=run_id or None, after=after
    )
    more = len(rows) > limit
    rows = rows[:limit]
    audit = sources.audit()
    heads = audit.heads_of((r.tenant_id, r.run_id) for r in rows)
    verified = verdicts.of((r.tenant_id, r.run_id) for r in rows) if verdicts else {}
    page: list[RunRow] = []
    for row in rows:
        head = heads.get((row.tenant_id, row.run_id))
        first = last = None
        if head is not None:
            first_link = audit.link_at(tenant, row.run_id, 0)
            last_link = audit.link_at(tenant, row.run_id, head.length - 1)
            first = event_time(first_link.event) if first_link else None
            last = event_time(last_link.event) if last_link else None
        links = head.length if head else 0
        state = row.state
        tokens_in, tokens_out = _tokens(row)
        page.append(
            RunRow(
                run_id=row.run_id,
                status=row.status or "",
                halted=row.halted,
                halt_reason=row.halt_reason,
                version=row.version,
                last_update=short(last),
                duration_s=seconds(first, last),
                tokens_in=tokens_in,
                tokens_out=tokens_out,
                model_nodes=state.model_nodes if state else 0,
                tool_nodes=state.tool_nodes if state else 0,
                retries=state.model_retries if state else 0,
                audit_state="none" if not links else "sealed" if links >= row.version else "behind",
                audit_links=links,
                verdict=verified.get((row.tenant_id, row.run_id)),
            )
        )
    return RunPage(page, rows[-1].run_id if more and rows else None)
