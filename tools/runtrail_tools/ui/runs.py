"""The runs list of one tenant: a page of projection rows, with times and audit state.

The projection store answers the page (:meth:`ProjectionStore.search`: search, filters, an
order, keyset cursors either way, the total), so page N costs what page 1 costs whatever the
tenant's size. Per page the audit store is read in one batch for the heads, and one
primary-key read per run for its first and last link (start time and last update).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import get_args

from runtrail.events.domain_events import RunStatus
from runtrail.instants import utc_instant
from runtrail.projection.names import utc_text
from runtrail.projection.store import SORT_KEYS, RunQuery, SortKey, StoredProjection, sort_value
from runtrail.whole_numbers import whole_number
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
    #: How many times a new process continued the run (run.resumed).
    resumes: int = 0


@dataclass(frozen=True)
class RunPage:
    rows: list[RunRow]
    #: Runs matching the filters, on every page.
    total: int
    #: (sort value, run ID) cursors of the pages after and before this one (None: none).
    next_after: tuple[str, str] | None
    prev_before: tuple[str, str] | None


class BadListing(ValueError):
    """A runs-list parameter that cannot mean what its name says (the page answers 400)."""


@dataclass(frozen=True)
class Listing:
    """What the list was asked for (the page's query string, parsed)."""

    text: str | None = None
    status: str | None = None
    has_errors: bool = False
    #: only runs a new process continued (run.resumed)
    resumed: bool = False
    since: str | None = None
    until: str | None = None
    sort: SortKey = "updated"
    descending: bool = True
    after: tuple[str, str] | None = None
    before: tuple[str, str] | None = None

    @classmethod
    def of(cls, params: Mapping[str, str]) -> Listing:
        """The listing ``params`` ask for; :class:`BadListing` names a time bound that is no
        time (compared as text it would keep none or all runs) and a cursor that is no
        position in the order asked for."""

        def given(name: str) -> str | None:
            return (params.get(name) or "").strip() or None

        for bound in ("since", "until"):
            value = given(bound)
            if value is not None and utc_instant(value) is None:
                raise BadListing(f"{bound} is not a time: {value}")
        sort = given("sort")
        sort = sort if sort in SORT_KEYS else "updated"
        at = params.get("at") or ""
        after, before = given("after"), given("before")
        if (after or before) and sort == "events" and whole_number(at) is None:
            raise BadListing(f"at is not an event count: {at}")
        return cls(
            text=given("q"),
            status=given("status"),
            has_errors=given("errors") == "1",
            resumed=given("resumed") == "1",
            since=given("since"),
            until=given("until"),
            sort=sort,
            descending=given("dir") != "asc",
            after=(at, after) if after else None,
            before=(at, before) if before and not after else None,
        )

    def query(self) -> dict[str, str]:
        """The filters and order as query parameters (no cursor): what every link keeps."""
        pairs = {
            "q": self.text,
            "status": self.status,
            "errors": "1" if self.has_errors else None,
            "resumed": "1" if self.resumed else None,
            "since": self.since,
            "until": self.until,
            "sort": None if self.sort == "updated" else self.sort,
            "dir": None if self.descending else "asc",
        }
        return {k: v for k, v in pairs.items() if v}


def _tokens(row: StoredProjection) -> tuple[int, int]:
    state = row.state
    if state is None:
        return 0, 0
    # domain usage events and raw runtime usage are kept apart (never both counted)
    tokens = state.tokens if (state.tokens.input_tokens or state.tokens.output_tokens) else None
    chosen = tokens or state.runtime_tokens
    return chosen.input_tokens, chosen.output_tokens


def _moment(text: str | None) -> str | None:
    """A time the form sent (``datetime-local``, read as UTC) as the store's text form."""
    return utc_text(text) if text else None


def run_rows(
    sources: Sources,
    tenant: str,
    rows: list[StoredProjection],
    verdicts: Verdicts | None = None,
) -> list[RunRow]:
    """The list's rows of these projected runs: the projection's counts beside the audit
    store's links, first and last event times, and this explorer's verdict."""
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
                resumes=state.resumes if state else 0,
            )
        )
    return page


def rows_of(
    sources: Sources, tenant: str, run_ids: list[str], verdicts: Verdicts | None = None
) -> list[RunRow]:
    """The list's rows of these runs of ``tenant`` (a run with no projection has none)."""
    projections = sources.projections()
    found = [projections.get(tenant, run_id) for run_id in dict.fromkeys(run_ids)]
    return run_rows(sources, tenant, [row for row in found if row is not None], verdicts)


def list_runs(
    sources: Sources,
    tenant: str,
    listing: Listing,
    *,
    limit: int = 50,
    verdicts: Verdicts | None = None,
) -> RunPage:
    """A page of ``tenant``'s runs as ``listing`` asks."""
    status = listing.status
    found = sources.projections().search(
        RunQuery(
            tenant,
            text=listing.text,
            status=None if status in (None, "halted") else status,
            halted=True if status == "halted" else None,
            has_errors=True if listing.has_errors else None,
            resumed=True if listing.resumed else None,
            since=_moment(listing.since),
            until=_moment(listing.until),
            sort=listing.sort,
            descending=listing.descending,
            after=listing.after,
            before=listing.before,
            limit=limit,
        )
    )
    rows = found.rows
    page = run_rows(sources, tenant, rows, verdicts)

    def cursor(row: StoredProjection) -> tuple[str, str]:
        return sort_value(row, listing.sort), row.run_id

    return RunPage(
        page,
        found.total,
        cursor(rows[-1]) if found.more_after and rows else None,
        cursor(rows[0]) if found.more_before and rows else None,
    )
