"""HTML of the explorer's pages, rendered on the server (every value escaped here).

No template engine: a page is a few functions of plain data, so what is escaped is visible in
one place. The layout, the JS and the CSS are the package's own (``static/``).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from runtrail.capture.record import NodeIoRecord
from runtrail.commands.model import CommandRefusal
from runtrail_tools.ui.actions import VERBS, Notice, Observed, cli_command
from runtrail_tools.ui.chat import Message, answer_messages
from runtrail_tools.ui.cost import PriceTable
from runtrail_tools.ui.live import format_positions
from runtrail_tools.ui.paging import TimelinePage, TimelineQuery
from runtrail_tools.ui.proof import (
    LogCheckpointView,
    TreeHeadView,
    inclusion_before_verify,
    link_number,
)
from runtrail_tools.ui.resume import ResumeView, by_step
from runtrail_tools.ui.resumes import ResumeMark
from runtrail_tools.ui.runs import STATUSES, Listing, RunPage, RunRow
from runtrail_tools.ui.timeline import EventView, Step, Timeline, tool_outcome_unknown
from runtrail_tools.ui.times import clock_text, duration_text, ms_text
from runtrail_tools.ui.waterfall import Waterfall


def e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def compact(value: Any) -> str:
    """One-line JSON of a value (strings as they are): the page wraps it; bytes stay few."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


def run_href(run_id: str, suffix: str = "") -> str:
    return f"/runs/{quote(run_id, safe='')}{suffix}"


def layout(title: str, body: str, tenant: str | None = None) -> str:
    who = (
        f'<span class="who">tenant <b id="tenant">{e(tenant)}</b> · '
        f'<form method="post" action="/logout" class="inline">'
        f'<button type="submit">log out</button></form></span>'
        if tenant
        else ""
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · runtrail</title>"
        '<link rel="stylesheet" href="/static/app.css"></head><body>'
        f'<header><a href="/runs" class="brand">runtrail</a> <span>run explorer</span>{who}'
        f"</header><main>{body}</main>"
        '<script src="/static/app.js"></script></body></html>'
    )


def login_page(error: str | None = None) -> str:
    problem = f'<p class="error" id="login-error">{e(error)}</p>' if error else ""
    body = (
        '<section class="login"><h1>Sign in</h1>'
        "<p>Paste your tenant's bearer token (the one the services' APIs take).</p>"
        f"{problem}"
        '<form method="post" action="/login">'
        '<label>Token <input type="password" name="token" id="token" autocomplete="off" '
        "required></label>"
        '<button type="submit" id="login">Sign in</button></form></section>'
    )
    return layout("sign in", body)


def _status_badge(status: str, halted: bool) -> str:
    badge = f'<span class="status s-{e(status)}">{e(status or "—")}</span>'
    if halted:
        badge += ' <span class="mark halted" title="the projection halted">halted</span>'
    return badge


def audit_cell(row: RunRow) -> str:
    """The list's audit column: how much is sealed, and whether anyone checked it here —
    "verified N/M at T" only for a chain this explorer verified, "not verified" otherwise."""
    sealed = f"{e(row.audit_state)} {row.audit_links}/{row.version}"
    verdict = row.verdict
    if verdict is None:
        return f'<span class="audit a-{e(row.audit_state)}">{sealed} · not verified</span>'
    at = verdict.at.strftime("%Y-%m-%d %H:%M:%S")
    if not verdict.valid:
        return (
            f'<span class="audit a-invalid" title="verified at {e(at)} UTC">INVALID at link '
            f"{verdict.broken_at} ({e(at)})</span>"
        )
    return (
        f'<span class="audit a-verified" title="{sealed}">verified '
        f"{verdict.length}/{row.audit_links} at {e(at)}</span>"
    )


#: The list's sortable columns: header text → sort key.
SORTABLE = {"run": "run", "events": "events", "last update": "updated"}
HEADERS = (
    "run",
    "status",
    "events",
    "last update",
    "duration",
    "tokens in / out",
    "model nodes",
    "tool nodes",
    "retries",
    "audit",
)


def _sort_header(title: str, listing: Listing) -> str:
    key = SORTABLE.get(title)
    if key is None:
        return f"<th>{e(title)}</th>"
    current = listing.sort == key
    # a click on the current column turns its direction; another column starts descending
    descending = not listing.descending if current else True
    query = {**listing.query(), "sort": key, "dir": "desc" if descending else "asc"}
    arrow = (" ▼" if listing.descending else " ▲") if current else ""
    hint = f"sort by {title}"
    return (
        f'<th><a class="sort" data-sort="{e(key)}" title="{e(hint)}" '
        f'href="/runs?{e(urlencode(query))}">{e(title)}{arrow}</a></th>'
    )


def _filters(listing: Listing) -> str:
    options = "".join(
        f'<option value="{e(s)}"{" selected" if s == listing.status else ""}>{e(s)}</option>'
        for s in STATUSES
    )
    sorts = "".join(
        f'<option value="{k}"{" selected" if k == listing.sort else ""}>{e(label)}</option>'
        for k, label in (
            ("updated", "last update"),
            ("started", "start"),
            ("run", "run ID"),
            ("events", "events"),
        )
    )
    direction = "".join(
        f'<option value="{v}"{" selected" if (v == "desc") == listing.descending else ""}>'
        f"{label}</option>"
        for v, label in (("desc", "newest / largest first"), ("asc", "oldest / smallest first"))
    )
    checked = " checked" if listing.has_errors else ""
    return (
        '<form class="filters" method="get" action="/runs">'
        f'<input name="q" id="search" placeholder="run, session, model or tool" '
        f'value="{e(listing.text or "")}">'
        f'<select name="status" id="status"><option value="">any status</option>{options}'
        "</select>"
        f'<label><input type="checkbox" name="errors" value="1" id="errors"{checked}> '
        "has errors</label>"
        f'<label><input type="checkbox" name="resumed" value="1" id="resumed"'
        f"{' checked' if listing.resumed else ''}> resumed</label>"
        f'<label>from <input type="datetime-local" name="since" id="since" '
        f'value="{e(listing.since or "")}"></label>'
        f'<label>to <input type="datetime-local" name="until" id="until" '
        f'value="{e(listing.until or "")}"></label><span class="dim">UTC</span>'
        f'<select name="sort" id="sort">{sorts}</select>'
        f'<select name="dir" id="dir">{direction}</select>'
        '<button type="submit" id="filter">filter</button></form>'
    )


def _resumed_badge(resumes: int) -> str:
    if not resumes:
        return ""
    times = "" if resumes == 1 else f" {resumes} times"
    return (
        f' <span class="mark m-resumed" data-resumes="{resumes}" '
        f'title="a new process continued the run">resumed{times}</span>'
    )


def run_row(r: RunRow) -> str:
    """One run in the list (re-rendered as the run's live events arrive)."""
    return (
        f'<tr class="run" data-run="{e(r.run_id)}" data-version="{r.version}">'
        f'<td><a href="{e(run_href(r.run_id))}">{e(r.run_id)}</a></td>'
        f"<td>{_status_badge(r.status, r.halted)}{_resumed_badge(r.resumes)}</td>"
        f'<td class="num">{r.version}</td>'
        f"<td>{e(r.last_update)}</td><td>{e(duration_text(r.duration_s))}</td>"
        f'<td class="num">{r.tokens_in} / {r.tokens_out}</td>'
        f'<td class="num" data-col="model">{r.model_nodes}</td>'
        f'<td class="num" data-col="tool">{r.tool_nodes}</td>'
        f'<td class="num">{r.retries}</td>'
        f"<td>{audit_cell(r)}</td></tr>"
    )


def runs_page(
    tenant: str, page: RunPage, listing: Listing, live: dict[int, int] | None = None
) -> str:
    """``live``: the explorer's live positions (None: no live updates), where the list's
    stream starts."""
    rows = "".join(run_row(r) for r in page.rows)
    if not page.rows:
        rows = f'<tr><td colspan="{len(HEADERS)}" class="empty" id="no-runs">no runs</td></tr>'
    query = listing.query()
    pager = ""
    if page.prev_before:
        at, run = page.prev_before
        prev = urlencode({**query, "before": run, "at": at})
        pager += f'<a id="first-page" href="/runs?{e(urlencode(query))}">« first page</a> '
        pager += f'<a id="prev-page" href="/runs?{e(prev)}">← previous page</a> '
    if page.next_after:
        at, run = page.next_after
        nxt = urlencode({**query, "after": run, "at": at})
        pager += f'<a id="next-page" href="/runs?{e(nxt)}">next page →</a>'
    noun = "run" if page.total == 1 else "runs"
    following = (
        f' data-live="/live/runs" data-from="{e(format_positions(live))}"'
        if live is not None and page.rows
        else ""
    )
    filtered = " match" if any(k != "sort" and k != "dir" for k in query) else ""
    body = (
        f"<h1>Runs of {e(tenant)}</h1>{_filters(listing)}"
        f'<p class="total"><b id="total">{page.total}</b> {noun}{filtered}</p>'
        f'<table id="runs"{following}><thead><tr>{"".join(_sort_header(h, listing) for h in HEADERS)}'
        f'</tr></thead><tbody>{rows}</tbody></table><nav class="pager">{pager}</nav>'
    )
    return layout("runs", body, tenant)


def _json_block(label: str, value: Any, cls: str = "") -> str:
    if value is None or value == "" or value == [] or value == {}:
        return ""
    return (
        f'<details class="{cls}"><summary>{e(label)}</summary>'
        f"<pre>{e(compact(value))}</pre></details>"
    )


def _marks(marks: Iterable[str]) -> str:
    return "".join(f'<span class="mark m-{e(m.replace(" ", "-"))}">{e(m)}</span>' for m in marks)


#: Event types whose actor is the person who decided (the command API writes the caller).
_DECIDED_BY = {
    "run.approval_granted": "approved by",
    "run.cancellation_requested": "cancellation requested by",
    "run.input_received": "answered by",
}


def _event_time(ev: EventView) -> str:
    """When it happened (``occurredAt``, on every event); the broker's ``recordedAt`` too,
    in the tooltip, when the sealed event carries it (commands do, publishers leave it)."""
    shown = ev.occurred_at or ev.recorded_at
    title = f"occurred {ev.occurred_at}" + (
        f" · recorded {ev.recorded_at}" if ev.recorded_at else " · recorded by the broker"
    )
    return f'<time datetime="{e(shown)}" title="{e(title)}">{e(clock_text(shown))}</time>'


def _actor(ev: EventView) -> str:
    if not ev.actor:
        return ""
    decided = _DECIDED_BY.get(ev.event_type)
    if ev.event_type == "run.failed" and ev.actor.split(":")[0] in ("user", "operator"):
        decided = "failed by"  # a denied approval: the person who denied it
    if decided:
        return f' <span class="actor decided">{e(decided)} <b>{e(ev.actor)}</b></span>'
    return f' <span class="actor dim">{e(ev.actor)}</span>'


#: The event a run's projection halted at: (event ID, the halt's reason).
Halt = tuple[str, str]


def _halted_here(ev: EventView, halt: Halt | None) -> str:
    if halt is None or not ev.event_id or ev.event_id != halt[0]:
        return ""
    return f' <span class="mark halted halt-here">the projection halted here: {e(halt[1])}</span>'


def event_row(ev: EventView, halt: Halt | None = None) -> str:
    """One event, kept small (a long run lists thousands): its data is fetched when opened."""
    seq = e(ev.sequence)
    number = link_number(ev.index)
    other = f' <span class="dim">seq {seq}</span>' if ev.sequence != number else ""
    return (
        f'<li class="event" data-index="{ev.index}" data-seq="{seq}" data-type="{e(ev.event_type)}">'
        f'<b class="link-no" title="link {number}, event sequence {seq}">#{number}</b>{other} '
        f"<code>{e(ev.event_type)}</code>{_marks(ev.marks)}{_halted_here(ev, halt)}{_actor(ev)}"
        f"{_event_time(ev)}"
        "<details><summary>data</summary></details></li>"
    )


def chat_html(messages: list[Message]) -> str:
    """Messages as a chat: one bubble per message, its tool calls and tool result inside."""
    bubbles = []
    for m in messages:
        calls = "".join(
            f'<div class="tool-call" data-call="{e(c.call_id)}">calls <b>{e(c.name)}</b>'
            f"<pre>{e(compact(c.arguments))}</pre></div>"
            for c in m.tool_calls
        )
        result = (
            f'<div class="tool-result" data-call="{e(m.answers)}">result of call '
            f"<code>{e(m.answers)}</code><pre>{e(compact(m.result))}</pre></div>"
            if m.answers is not None
            else ""
        )
        text = f'<div class="text">{e(m.text)}</div>' if m.text else ""
        bubbles.append(
            f'<div class="msg r-{e(m.role)}" data-role="{e(m.role)}">'
            f'<span class="role">{e(m.role)}</span>{text}{calls}{result}</div>'
        )
    return f'<div class="chat">{"".join(bubbles) or "<p class=dim>no messages</p>"}</div>'


def waterfall_section(waterfall: Waterfall | None) -> str:
    """Each step and node on the run's time axis, with its duration (SVG attributes place
    the bars: the CSP allows no inline style)."""
    if waterfall is None:
        return ""
    rows = []
    for bar in waterfall.bars:
        x, width = waterfall.offset(bar.start_ms), waterfall.width(bar.duration_ms)
        marker, note = "", ""
        if bar.first_token is not None:
            at = waterfall.offset(bar.start_ms + bar.first_token.after_ms)
            marker = f'<line class="ttft" x1="{at}" x2="{at}" y1="0" y2="12"></line>'
            note = (
                f' <span class="ttft" data-ttft-ms="{bar.first_token.after_ms}">first token '
                f"{e(ms_text(bar.first_token.after_ms))} · {bar.first_token.chunks} chunks</span>"
            )
        record = f' data-record="{e(bar.record_id)}"' if bar.record_id else ""
        if bar.retries:
            noun = "retry" if bar.retries == 1 else "retries"
            note += f' <span class="mark m-retry" data-retries="{bar.retries}">{bar.retries} {noun}</span>'
        rows.append(
            f'<tr class="wf wf-{e(bar.kind)}" data-step="{e(bar.step)}"{record} '
            f'data-start-ms="{bar.start_ms}" data-duration-ms="{bar.duration_ms}">'
            f'<td class="wf-label">{e(bar.label)}</td><td class="wf-bar">'
            '<svg viewBox="0 0 1000 12" preserveAspectRatio="none" role="img">'
            f'<rect x="{x}" y="1" width="{width}" height="10"></rect>{marker}</svg></td>'
            f'<td class="wf-time">{e(ms_text(bar.duration_ms))}{note}</td></tr>'
        )
    total = ms_text(waterfall.span_ms)
    return (
        f'<section id="waterfall"><h2>Waterfall <span class="dim">({e(total)})</span></h2>'
        f'<table class="waterfall">{"".join(rows)}</table></section>'
    )


def _cost_mark(record: NodeIoRecord, prices: PriceTable | None) -> str:
    if prices is None or record.node_type != "MODEL":
        return ""
    cost = prices.node_cost(record)
    if cost is None:
        return f' <span class="cost dim">no price for {e(record.model_id or "its model")}</span>'
    return f' <span class="cost">{e(prices.shown(cost))}</span>'


def node_card(record: NodeIoRecord, live_enabled: bool, prices: PriceTable | None = None) -> str:
    unknown = tool_outcome_unknown(record)
    flags = ""
    if record.incomplete:
        flags += f'<span class="mark m-incomplete">incomplete: {e(record.incomplete_reason)}</span>'
    if unknown:
        flags += '<span class="mark m-outcome-unknown">outcome unknown</span>'
    head = (
        f'<div class="node-head"><b>{e(record.node_type)}</b> {e(record.node_id)} '
        f'<span class="dim">{e(record.model_id or "")}</span> {flags}'
        f'<span class="dim">{record.duration_ms} ms</span>'
    )
    if record.node_type == "MODEL":
        head += (
            f' <span class="tokens">tokens {e(record.input_tokens)} in / '
            f"{e(record.output_tokens)} out</span>" + _cost_mark(record, prices)
        )
        if record.retry_count:
            noun = "retry" if record.retry_count == 1 else "retries"
            head += f' <span class="mark m-retry">{record.retry_count} {noun}</span>'
    head += "</div>"
    if record.node_type == "MODEL":
        answer = answer_messages(record.outputs, record.output_text)
        body = (
            '<details class="lazy-chat"><summary>prompt</summary><div class="chat-slot"></div>'
            '<details class="lazy-io" data-part="inputs"><summary>raw JSON</summary><pre></pre>'
            "</details></details>"
            + (
                f'<div class="output"><span class="dim">output</span>{chat_html(answer)}</div>'
                if answer
                else ""
            )
            + _json_block("reasoning", record.reasoning_text, "reasoning")
            + '<details class="lazy-io" data-part="outputs"><summary>raw response</summary>'
            "<pre></pre></details>"
        )
        live_button = (
            f'<button class="replay-live" data-record="{e(record.record_id)}">'
            "live replay with the other model</button>"
            '<details class="replay-edit"><summary>edit the prompt and parameters</summary>'
            '<label>prompt (JSON)<textarea class="edit-prompt" rows="8" spellcheck="false">'
            "</textarea></label>"
            '<label>parameters (JSON)<textarea class="edit-params" rows="3" '
            'spellcheck="false"></textarea></label>'
            f'<button class="replay-edited" data-record="{e(record.record_id)}">'
            "live replay with this prompt</button></details>"
            if live_enabled
            else '<span class="dim">live replay off (no model client configured)</span>'
        )
        body += (
            f'<div class="replay"><button class="replay-mock" '
            f'data-record="{e(record.record_id)}">mock replay</button> {live_button}'
            '<div class="replay-out"></div></div>'
        )
    else:
        body = _json_block("arguments", record.inputs, "args") + (
            _json_block("result", record.outputs, "result")
            if record.outputs is not None
            else '<div class="dim">no result recorded</div>'
        )
    return (
        f'<div class="node n-{e(record.node_type.lower())}" '
        f'id="{e(node_anchor(record.record_id))}" data-record="{e(record.record_id)}">'
        f"{head}{body}</div>"
    )


def resume_note(mark: ResumeMark) -> str:
    """Where a new process took over, before the step's events: the crash gap (the run had no
    process from the earlier life's last event to this), then who resumed and what the resume
    cache replayed."""
    gap = ""
    if mark.gap_ms is not None:
        since = f" after event seq {e(mark.last_sequence)}" if mark.last_sequence else ""
        gap = (
            f'<p class="crash-gap" data-gap-ms="{mark.gap_ms}">crash gap '
            f"<b>{e(duration_text(mark.gap_ms / 1000))}</b>: no process recorded anything{since}"
            "</p>"
        )
    who = f" ({e(mark.process)})" if mark.process else ""
    before = f"; before it {e(mark.previous_process)}" if mark.previous_process else ""
    hits = f" · {mark.cache_hits} cache hits" if mark.cache_hits else ""
    return (
        f'<div class="resume-note" data-index="{mark.index}" data-at-step="{e(mark.at_step)}" '
        f'data-cached-steps="{mark.cached_steps}">{gap}'
        f'<p class="resumed"><span class="mark m-resumed">resumed</span> {e(mark.text)}{who}'
        f"{before}{hits}</p></div>"
    )


def step_block(
    step: Step, live_enabled: bool, halt: Halt | None = None, prices: PriceTable | None = None
) -> str:
    nodes = "".join(node_card(n, live_enabled, prices) for n in step.nodes)
    events = "".join(event_row(ev, halt) for ev in step.events)
    retried = (
        f' <span class="mark m-retry">{step.retries} failed attempt'
        f"{'' if step.retries == 1 else 's'} retried</span>"
        if step.retries
        else ""
    )
    return (
        f'<section class="step" data-step="{e(step.step)}" data-turn="{e(step.turn_id or "")}">'
        f"<h3>{e(step.label)}{retried}</h3>"
        + "".join(resume_note(r) for r in step.resumes)
        + f'<div class="step-body"><ol class="events">{events}</ol>'
        f'<div class="nodes">{nodes}</div></div></section>'
    )


def _utc(epoch_s: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def log_block(log: LogCheckpointView | None, run_id: str) -> str:
    """The transparency log's latest checkpoint: signed, witnessed by whom, and whether the
    run's links are in it; the run's offline proof bundle to download."""
    if log is None:
        return '<h3>Transparency log</h3><p id="log-checkpoint">no log checkpoint signed yet</p>'
    sig = {True: "valid", False: "INVALID", None: "not checked (no public key found)"}[
        log.signature_valid
    ]
    if log.witnesses == 0:
        witnessed = "no witnesses configured"
    else:
        names = ", ".join(f"{name} at {_utc(at)}" for name, at in sorted(log.cosigned.items()))
        state = "witnessed" if log.witnessed else "NOT witnessed"
        witnessed = (
            f"{state}: {len(log.cosigned)} of {log.witnesses} trusted witnesses cosigned "
            f"(quorum {log.quorum})" + (f": {names}" if names else "")
        )
    if log.run_logged:
        where = f"all {log.links} links, the last one at leaf {log.last_leaf}"
    elif log.links:
        where = "not all of its links are in this checkpoint yet (a later one will hold them)"
    else:
        where = "no links"
    bundle = (
        f' · <a id="download-bundle" href="{e(run_href(run_id, "/bundle.json"))}">'
        "offline proof bundle</a>"
        if log.links
        else ""
    )
    return (
        '<h3>Transparency log</h3><dl id="log-checkpoint">'
        f'<dt>checkpoint</dt><dd id="log-size">{log.size} leaves · {e(log.created_at)}</dd>'
        f'<dt>signature</dt><dd id="log-signature">{e(sig)}</dd>'
        f'<dt>witnesses</dt><dd id="log-witnessed" class="{"ok" if log.witnessed else ""}">'
        f"{e(witnessed)}</dd>"
        f'<dt>this run</dt><dd id="log-run">{e(where)}</dd></dl>'
        + _json_block("cosigned checkpoint", log.note)
        + (f"<p>download:{bundle[2:]}</p>" if bundle else "")
    )


def proof_section(
    run_id: str,
    tree_head: TreeHeadView | None,
    verifier: bool,
    log: LogCheckpointView | None = None,
) -> str:
    if tree_head is None:
        cp = "<p>No signed tree head in the audit store yet.</p>"
    else:
        sig = {True: "valid", False: "INVALID", None: "not checked"}[tree_head.signature_valid]
        inc = inclusion_before_verify(tree_head)
        cp = (
            f'<dl><dt>tree head</dt><dd id="tree-head-id">#{tree_head.tree_head_id} · '
            f"{e(tree_head.created_at)} · {tree_head.tenant_runs} of your runs · root "
            f"<code>{e(tree_head.root_b64)}</code></dd>"
            f'<dt>signature</dt><dd id="signature">{e(sig)} ({e(tree_head.signature_detail)})'
            f'</dd><dt>run head inclusion</dt><dd id="inclusion">{e(inc)}</dd></dl>'
            + _json_block("signed note", tree_head.note)
            + _json_block("inclusion proof", tree_head.proof)
        )
    downloads = f'<a id="download-export" href="{e(run_href(run_id, "/export.jsonl"))}">export</a>'
    if verifier:
        downloads += ' · <a id="download-verifier" href="/verifier.py">standalone verifier</a>'
    return (
        '<section id="proof" class="panel"><h2>Proof</h2>'
        '<p><button id="verify" data-url="' + e(run_href(run_id, "/verify")) + '">'
        'verify the chain now</button> <span id="verdict"></span></p>'
        f"{cp}<p>download: {downloads}</p>{log_block(log, run_id)}</section>"
    )


def node_anchor(record_id: str) -> str:
    return f"node-{record_id}"


def resume_section(
    view: ResumeView | None, problem: str | None, records: list[NodeIoRecord] | None = None
) -> str:
    if view is None:
        return f'<section id="resume" class="panel"><h2>Resume</h2><p>{e(problem)}</p></section>'
    rows = []
    for x, node in by_step(view.entries, records or []):
        what = e(x.tool_name or x.kind.value)
        link = (
            f'<a class="entry-node" href="#{e(node_anchor(node.record_id))}">{what}</a>'
            if node is not None
            else f'{what} <span class="dim">(no captured node)</span>'
        )
        rows.append(
            f'<tr class="entry" data-step="{e(x.step)}" data-kind="{e(x.kind.value)}">'
            f"<td>step {e(x.step)}</td><td>{link}</td>"
            f'<td><code title="{e(x.key)}">{e(x.key[:12])}…</code></td>'
            f"<td>{_json_block('result', x.result)}</td></tr>"
        )
    entries = "".join(rows)
    intents = "".join(
        f'<li class="intent">{e(i.tool_name)} (call {e(i.call_id)}, step {e(i.step)}) '
        f'<span class="mark m-outcome-unknown">outcome unknown</span>'
        f"{_json_block('arguments', i.arguments)}</li>"
        for i in view.intents
    )
    sessions = "".join(
        f'<li class="session" data-session="{e(s.session_id)}"><b>{e(s.session_id)}</b>: '
        + (
            f'digest <code class="digest">{e(s.digest)}</code>, {s.events} events'
            + _json_block("memory", s.memory)
            if s.digest
            else e(s.problem or "no snapshot stored")
        )
        + "</li>"
        for s in view.sessions
    )
    return (
        '<section id="resume" class="panel"><h2>Resume</h2>'
        f'<p>cache holds <b id="cache-count">{len(view.entries)}</b> entries for this run; '
        f"last sequence seen {view.last_sequence}</p>"
        f'<table class="entries"><tbody>{entries}</tbody></table>'
        f'<h3>open intents ({len(view.intents)})</h3><ul id="intents">{intents or "<li>none</li>"}'
        f'</ul><h3>sessions</h3><ul id="sessions">{sessions or "<li>none</li>"}</ul></section>'
    )


def refusals_section(refusals: list[CommandRefusal] | None, problem: str | None = None) -> str:
    """The commands the command store refused for this run: a refusal appended nothing, so
    only this panel shows that someone tried (a stale approval, a cancel too late)."""
    if refusals is None:
        return (
            '<section id="refusals" class="panel"><h2>Refused commands</h2>'
            f"<p>{e(problem)}</p></section>"
        )
    rows = "".join(
        f'<tr class="refusal" data-code="{e(r.code)}"><td><time datetime="{e(r.refused_at)}" '
        f'title="{e(r.refused_at)}">{e(clock_text(r.refused_at))}</time></td>'
        f"<td><b>{e(r.name)}</b> by {e(r.actor.id)}</td>"
        f"<td>seen v{r.expected_version}, run at v{r.version}</td>"
        f'<td><span class="mark m-refused">{e(r.code)}</span> {e(r.reason)}</td></tr>'
        for r in refusals
    )
    return (
        '<section id="refusals" class="panel"><h2>Refused commands '
        f'(<span id="refusal-count">{len(refusals)}</span>)</h2>'
        + (f'<table class="refusals"><tbody>{rows}</tbody></table>' if rows else "<p>none</p>")
        + "</section>"
    )


#: Who the page's commands name when the operator does not say (the CLI's ``--by`` fallback).
DEFAULT_BY = "operator"


def notice_html(notice: Notice | None) -> str:
    """What became of the command just sent, as the CLI says it."""
    if notice is None:
        return ""
    cls = "ok" if notice.accepted else "bad"
    return (
        f'<div id="command-outcome" class="notice {cls}"><b>{e(notice.text)}</b>'
        + _json_block("the command API's answer", notice.answer)
        + "</div>"
    )


def actions_section(
    run_id: str, observed: Observed | str | None, url: str | None, form_token: str | None
) -> str:
    """Approve, deny, request cancellation: what the command API allows now, at the version
    it showed, each with the same command for a shell."""
    head = '<section id="actions" class="panel"><h2>Actions</h2>'
    if observed is None:
        return head + "<p>The command API has no such run: it takes no commands.</p></section>"
    if isinstance(observed, str):
        return head + f"<p>{e(observed)}</p></section>"
    verbs = [v for v, (command, _) in VERBS.items() if command in observed.allowed]
    seen = (
        f'<p>command API: <span id="observed-status">{e(observed.status)}</span> at version '
        f'<b id="observed-version">{observed.version}</b>'
        + (f" · pending <code>{e(observed.digest)}</code>" if observed.digest else "")
        + "</p>"
    )
    if not verbs or form_token is None or url is None:
        why = "nothing is allowed in this state" if not verbs else "sign in to act"
        return head + seen + f'<p class="dim">{why}</p></section>'
    buttons = "".join(
        f'<button type="submit" name="verb" value="{e(v)}" id="do-{e(v)}">'
        f"{e(VERBS[v][1])}</button> "
        for v in verbs
    )
    clis = "".join(
        f'<li><code class="cli" id="cli-{e(v)}">'
        f"{e(cli_command(v, run_id, url, observed, DEFAULT_BY))}</code> "
        f'<button type="button" class="copy-cli" data-for="cli-{e(v)}">copy</button></li>'
        for v in verbs
    )
    form = (
        f'<form method="post" action="{e(run_href(run_id, "/commands"))}" id="command-form">'
        f'<input type="hidden" name="csrf" value="{e(form_token)}">'
        f'<input type="hidden" name="version" value="{observed.version}">'
        f'<input type="hidden" name="digest" value="{e(observed.digest or "")}">'
        f'<label>by <input name="by" id="command-by" value="{DEFAULT_BY}" required></label> '
        '<label>reason <input name="reason" id="command-reason"></label><p>'
        f"{buttons}</p></form>"
    )
    return (
        head
        + seen
        + form
        + '<p class="dim">the same from a shell (token in RUNTRAIL_COMMAND_TOKEN):</p>'
        + f'<ul class="cli-commands">{clis}</ul><span id="copy-state"></span></section>'
    )


def lineage(projection: dict[str, Any]) -> str:
    """Where a run started from (run.branched: a fork or time-travel replay), and the input it
    waits for: empty when neither."""
    parts = []
    parent = projection.get("parentRunId")
    branched = projection.get("branchedFrom")
    if parent or branched:
        origin = (
            f'run <a id="parent-run" href="{e(run_href(parent))}">{e(parent)}</a>'
            if parent
            else "a saved state"
        )
        where = ""
        if isinstance(branched, dict) and branched:
            where = " at " + ", ".join(
                f"{e(k)} <code>{e(v)}</code>" for k, v in sorted(branched.items()) if v
            )
        elif branched:
            where = f" at <code>{e(branched)}</code>"
        parts.append(f'<p class="lineage" id="lineage">a fork: branched from {origin}{where}</p>')
    pending = projection.get("pendingInput")
    if isinstance(pending, dict) and pending.get("requestId"):
        parts.append(
            '<p class="lineage" id="pending-input">waiting for input: request '
            f"<code>{e(pending['requestId'])}</code></p>"
        )
    return "".join(parts)


def _run_cost(records: list[NodeIoRecord], prices: PriceTable | None) -> str:
    if prices is None:
        return ""
    spent = prices.run_cost(records)
    left_out = (
        f' <span class="dim">({spent.unpriced} model node{"" if spent.unpriced == 1 else "s"} '
        "without a price left out)</span>"
        if spent.unpriced
        else ""
    )
    return f' · cost <span id="run-cost">{e(prices.shown(spent.total))}</span>{left_out}'


def run_summary(run: dict[str, Any], timeline: Timeline, prices: PriceTable | None = None) -> str:
    """The run page's header line (status, version, counts) and lineage: re-rendered as live
    events arrive, so it is one function."""
    return (
        f'<div id="run-summary"><p class="summary">'
        f"{_status_badge(run.get('status') or '', run.get('halted', False))} "
        f'· version <span id="run-version">{e(run.get("version"))}</span> · '
        f'<span id="event-count">{timeline.events}</span> events · {len(timeline.nodes)} nodes'
        + _run_cost(timeline.nodes, prices)
        + (f' · <span class="error">{e(run.get("haltReason"))}</span>' if run.get("halted") else "")
        + "</p>"
        + lineage(run.get("projection") or {})
        + "</div>"
    )


def timeline_nav(run_id: str, page: TimelinePage, query: TimelineQuery) -> str:
    """The timeline's pager, its event-type filter and its jump to a step (a plain GET form:
    the page is rendered on the server, the jump scrolled to by the page's script)."""
    types = "".join(
        f'<option value="{e(t)}"{" selected" if t in query.types else ""}>{e(t)}</option>'
        for t in page.types
    )
    href = run_href(run_id)
    links = ""
    if page.number > 0:
        links += (
            f' <a id="timeline-first" href="{e(href)}?{e(urlencode(query.query(0)))}">« first</a>'
            f' <a id="timeline-prev" href="{e(href)}?{e(urlencode(query.query(page.number - 1)))}">'
            "← previous</a>"
        )
    if not page.is_last:
        links += (
            f' <a id="timeline-next" href="{e(href)}?{e(urlencode(query.query(page.number + 1)))}">'
            "next →</a>"
            f' <a id="timeline-last" href="{e(href)}?{e(urlencode(query.query(page.count - 1)))}">'
            "last »</a>"
        )
    return (
        f'<nav class="timeline-nav" id="timeline-nav"><form method="get" action="{e(href)}" '
        'id="timeline-filter"><label>event type <select name="type" id="event-type">'
        f'<option value="">all types</option>{types}</select></label> '
        '<label>jump to step <input type="number" name="step" id="jump-step" min="0" '
        f'value="{e(page.jumped_to if page.jumped_to is not None else "")}"></label> '
        '<button type="submit" id="timeline-go">show</button></form>'
        f'<span id="timeline-page" data-page="{page.number + 1}" data-pages="{page.count}">'
        f"page {page.number + 1} of {page.count} · {page.shown_events} of "
        f"{page.matching_events} events</span>{links}</nav>"
    )


def run_page(
    tenant: str,
    run: dict[str, Any],
    timeline: Timeline,
    waterfall: Waterfall | None,
    proof: str,
    resume: str,
    live_from: str | None,
    live_enabled: bool,
    actions: str = "",
    prices: PriceTable | None = None,
    page: TimelinePage | None = None,
    query: TimelineQuery | None = None,
) -> str:
    run_id = run["runId"]
    at = run.get("haltedAt") or {}
    halt = (at["eventId"], run.get("haltReason") or "") if at.get("eventId") else None
    shown = timeline.steps if page is None else page.steps
    steps = "".join(step_block(s, live_enabled, halt, prices) for s in shown)
    last = page is None or page.is_last
    unplaced = (
        "".join(node_card(n, live_enabled, prices) for n in timeline.unplaced) if last else ""
    )
    if unplaced:
        steps += f'<section class="step"><h3>nodes with no event group</h3>{unplaced}</section>'
    head = f'<h1>Run <span id="run-id">{e(run_id)}</span></h1>' + run_summary(run, timeline, prices)
    live = (
        f'<div id="live" data-url="{e(run_href(run_id, "/live"))}" data-from="{e(live_from)}" '
        f'data-view="{e(run_href(run_id, "/view.json"))}">'
        '<span id="live-state">live: connecting</span></div>'
        if live_from
        else ""
    )
    nav = timeline_nav(run_id, page, query or TimelineQuery()) if page is not None else ""
    jump = (
        f' data-jump="{page.jumped_to}"' if page is not None and page.jumped_to is not None else ""
    )
    filtered = " data-filtered" if query is not None and query.types else ""
    body = (
        f"{head}{waterfall_section(waterfall)}"
        f'<div class="columns"><div class="timeline" id="timeline"{jump}{filtered}'
        f' data-last-page="{"1" if last else "0"}"><h2>Timeline</h2>'
        f"{nav}{live}{steps}</div><aside>{actions}{proof}{resume}</aside></div>"
    )
    return layout(f"run {run_id}", body, tenant)
