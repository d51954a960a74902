"""The explorer's routes (Starlette). Store reads are synchronous endpoints (Starlette runs
them in its thread pool); only the login form and the live stream are ``async``.

Every route but ``/login``, ``/healthz`` and ``/static`` needs a signed-in session or a
bearer token: HTML routes redirect to the login form, JSON and stream routes answer 401. A run is looked up under the token's
tenant only, so another tenant's run is a plain 404.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from runtrail.audit.errors import MalformedLink
from runtrail.audit.export import export_lines
from runtrail.audit.link import LinkSummary
from runtrail.audit.log_proofs import NoProof
from runtrail.capture.reader import CaptureReadError
from runtrail.capture.replay import ReplayError
from runtrail.events.limits import DEFAULT_MAX_EVENT_BYTES
from runtrail.projection.display import row_json
from runtrail.whole_numbers import whole_number
from runtrail_services.http_body import body_within
from runtrail_tools.cli.capture_cmd import FactoryError, to_json
from runtrail_tools.cli.store_open import StoreUnreachable
from runtrail_tools.demo.tamper import independent_verifier
from runtrail_tools.ui import (
    chat,
    drops,
    live,
    markup,
    paging,
    proof,
    pruned,
    replay,
    resume,
    resumes,
    runs,
    timeline,
)
from runtrail_tools.ui.actions import VERBS, Actions
from runtrail_tools.ui.auth import Auth, clear_login, set_login
from runtrail_tools.ui.chains import Chains
from runtrail_tools.ui.cost import PriceTable
from runtrail_tools.ui.guard import Guard
from runtrail_tools.ui.sources import Sources
from runtrail_tools.ui.waterfall import build_waterfall

log = logging.getLogger(__name__)


@dataclass
class Explorer:
    """What the routes share: the stores, the tokens, and whether live replay is on."""

    sources: Sources
    auth: Auth
    partitions: live.Partitions
    hub: live.LiveHub
    chains: Chains
    verdicts: proof.Verdicts
    actions: Actions
    #: the operator's price table (``--price-table``); None: no costs shown
    prices: PriceTable | None = None

    @property
    def model_client(self) -> str | None:
        return self.sources.ui.model_client

    def verifier(self) -> Path | None:
        return independent_verifier()


def _explorer(request: Request) -> Explorer:
    return request.app.state.explorer  # type: ignore[no-any-return]


def _tenant(request: Request) -> str | None:
    return _explorer(request).auth.tenant(request)


def _html_auth(handler: Callable[[Request, str], Response]) -> Callable[[Request], Response]:
    def endpoint(request: Request) -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return RedirectResponse("/login", status_code=303)
        return handler(request, tenant)

    return endpoint


def _api_auth(handler: Callable[[Request, str], Response]) -> Callable[[Request], Response]:
    def endpoint(request: Request) -> Response:
        tenant = _tenant(request)
        if tenant is None:
            return JSONResponse({"error": "a valid bearer token is required"}, status_code=401)
        return handler(request, tenant)

    return endpoint


def _run_row(explorer: Explorer, tenant: str, run_id: str) -> dict[str, Any] | None:
    row = explorer.sources.projections().get(tenant, run_id)
    if row is not None:
        return row_json(row)
    if explorer.sources.audit().head(tenant, run_id) is not None:
        return {"tenantId": tenant, "runId": run_id, "status": None, "version": "0"}
    return None


def _not_found(run_id: str) -> HTMLResponse:
    return HTMLResponse(
        markup.layout("not found", f"<h1>No run {markup.e(run_id)}</h1>"), status_code=404
    )


# --- pages --------------------------------------------------------------------------------------
#: The largest form body the explorer reads (a sign-in or a command: a token, a few fields).
FORM_BYTES = 64 * 1024


def login_form(request: Request) -> Response:
    return HTMLResponse(markup.login_page())


async def login(request: Request) -> Response:
    raw = await body_within(request, FORM_BYTES)
    if raw is None:
        return PlainTextResponse(f"a form is at most {FORM_BYTES} bytes\n", 413)
    body = raw.decode("utf-8", "replace")
    token = (parse_qs(body).get("token") or [""])[0].strip()
    session = _explorer(request).auth.sign_in(token)
    if session is None:
        return HTMLResponse(markup.login_page("That token is not valid."), status_code=401)
    response = RedirectResponse("/runs", status_code=303)
    set_login(response, session, secure=request.url.scheme == "https")
    return response


def logout(request: Request) -> Response:
    _explorer(request).auth.sign_out(request)
    response = RedirectResponse("/login", status_code=303)
    clear_login(response)
    return response


def runs_list(request: Request, tenant: str) -> Response:
    explorer = _explorer(request)
    try:
        listing = runs.Listing.of(request.query_params)
    except runs.BadListing as exc:
        return HTMLResponse(markup.layout("bad filter", f"<h1>{markup.e(str(exc))}</h1>"), 400)
    page = runs.list_runs(
        explorer.sources,
        tenant,
        listing,
        limit=explorer.sources.ui.page_size,
        verdicts=explorer.verdicts,
    )
    live_at = explorer.hub.positions() if explorer.partitions.of("") is not None else None
    return HTMLResponse(markup.runs_page(tenant, page, listing, live_at))


#: How many runs one runs-list stream follows at most (a page of the list).
LIST_FOLLOWS = 200


def runs_live(request: Request) -> Response:
    """The runs list's stream: which shown run (``?run=``) has a new event."""
    explorer = _explorer(request)
    tenant = explorer.auth.tenant(request)
    if tenant is None:
        return JSONResponse({"error": "a valid bearer token is required"}, status_code=401)
    run_ids = frozenset(request.query_params.getlist("run")[:LIST_FOLLOWS])
    return StreamingResponse(
        explorer.hub.runs_stream(tenant, run_ids, live.parse_positions(request.query_params)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def runs_rows(request: Request, tenant: str) -> Response:
    """The list's rows of ``?run=`` runs as they are now, as HTML (escaped like every page)."""
    explorer = _explorer(request)
    wanted = request.query_params.getlist("run")[:LIST_FOLLOWS]
    rows = runs.rows_of(explorer.sources, tenant, wanted, explorer.verdicts)
    return JSONResponse({r.run_id: {"html": markup.run_row(r), "version": r.version} for r in rows})


def _sessions_of(links: list[LinkSummary]) -> list[str]:
    return list(dict.fromkeys(link.session_id for link in links if link.session_id))


@dataclass
class RunParts:
    """What a run page shows, read from the stores once: the page and its live refresh
    (:func:`run_live_view`) render from the same parts."""

    run: dict[str, Any]
    built: timeline.Timeline
    records: list[Any]
    resume_html: str


def _run_parts(explorer: Explorer, tenant: str, run_id: str) -> RunParts | None:
    run = _run_row(explorer, tenant, run_id)
    if run is None:
        return None
    sources = explorer.sources
    try:
        links = explorer.chains.summaries(sources.audit(), tenant, run_id)
    except MalformedLink as exc:  # the page still opens: verifying it names the broken link
        log.warning("ui: the chain of %s cannot be listed: %s", run_id, exc)
        links = []
    try:
        records = timeline.node_records(sources, tenant, run_id)
    except (CaptureReadError, OSError) as exc:
        log.warning("ui: capture records of %s: %s", run_id, exc)
        records = []
    try:
        view = resume.resume_view(sources, tenant, run_id, _sessions_of(links))
        resume_html = markup.resume_section(view, None, records)
    except StoreUnreachable as exc:
        resume_html = markup.resume_section(None, str(exc))
    try:
        resume_html += markup.refusals_section(sources.commands().refusals(tenant, run_id))
    except StoreUnreachable as exc:
        resume_html += markup.refusals_section(None, str(exc))
    resume_html += drops.not_recorded_panel(sources, tenant, run_id)
    resume_html += pruned.pruned_panel(sources, tenant, run)
    try:
        marks = resumes.resume_marks(sources.audit(), tenant, run_id, links)
    except MalformedLink as exc:
        log.warning("ui: the resumes of %s cannot be read: %s", run_id, exc)
        marks = {}
    built = timeline.build_timeline(links, records, marks)
    return RunParts(run, built, records, resume_html)


def _proof_html(explorer: Explorer, tenant: str, run_id: str) -> str:
    tree_head = proof.latest_tree_head(explorer.sources, tenant, run_id)
    log_view = proof.log_checkpoint(explorer.sources, tenant, run_id)
    return markup.proof_section(run_id, tree_head, explorer.verifier() is not None, log_view)


def run_view(request: Request, tenant: str) -> Response:
    explorer = _explorer(request)
    run_id = request.path_params["run_id"]
    sources = explorer.sources
    live_from = None
    # the position first, then the chain: nothing between them is lost (see live.py); with
    # no broker the page still shows what the stores hold, without live updates
    partition = explorer.partitions.of(run_id)
    if partition is not None:
        stored = sources.audit().stored_offsets(sources.settings.events_topic, [partition])
        live_from = f"{partition}:{stored.get(partition, 0)}"
    parts = _run_parts(explorer, tenant, run_id)
    if parts is None:
        return _not_found(run_id)
    query = paging.TimelineQuery.of(request.query_params, request.query_params.getlist("type"))
    page_of = paging.paginate(parts.built, query)
    page = markup.run_page(
        tenant,
        parts.run,
        parts.built,
        build_waterfall(paging.page_timeline(parts.built, page_of)),
        _proof_html(explorer, tenant, run_id),
        parts.resume_html,
        live_from,
        explorer.model_client is not None,
        _actions_html(request, explorer, tenant, run_id),
        explorer.prices,
        page_of,
        query,
    )
    return HTMLResponse(page)


def run_live_view(request: Request, tenant: str) -> Response:
    """What a followed run page replaces as events arrive: its header, its side panels and
    the steps holding events of sequence ``?since=`` on (with their node cards), rendered as
    the page renders them, with the version and event count the stores hold now (the page
    asks again while they lag behind the events it saw)."""
    explorer = _explorer(request)
    run_id = request.path_params["run_id"]
    parts = _run_parts(explorer, tenant, run_id)
    if parts is None:
        return JSONResponse({"error": "no such run"}, status_code=404)
    since = request.query_params.get("since", "")
    first = whole_number(since)
    steps = [
        s
        for s in parts.built.steps
        if first is not None and any((link.sequence or 0) >= first for link in s.links)
    ]
    live_enabled = explorer.model_client is not None
    run = parts.run
    halt_at = run.get("haltedAt") or {}
    halt = (halt_at["eventId"], run.get("haltReason") or "") if halt_at.get("eventId") else None
    return JSONResponse(
        {
            "version": int(run.get("version") or 0),
            "events": parts.built.events,
            "sequences": [link.sequence for s in steps for link in s.links],
            "steps": [markup.step_block(s, live_enabled, halt, explorer.prices) for s in steps],
            "summary": markup.run_summary(run, parts.built, explorer.prices),
            "actions": _actions_html(request, explorer, tenant, run_id),
            "proof": _proof_html(explorer, tenant, run_id),
            "resume": parts.resume_html,
        }
    )


def _actions_html(request: Request, explorer: Explorer, tenant: str, run_id: str) -> str:
    session = explorer.auth.session(request)
    notice = explorer.actions.take(session[0], run_id) if session else None
    observed = explorer.actions.observe(tenant, run_id)
    form_token = session[1].form_token if session else None
    section = markup.actions_section(run_id, observed, explorer.actions.url, form_token)
    return markup.notice_html(notice) + section


async def run_command(request: Request) -> Response:
    """A command from the run page's form: only from a signed-in browser whose page carried
    this session's form token; sent as the CLI sends it, the outcome shown on the run page."""
    explorer = _explorer(request)
    session = explorer.auth.session(request)
    if session is None:
        return PlainTextResponse("sign in first: commands come from the run page\n", 403)
    raw = await body_within(request, FORM_BYTES)
    if raw is None:
        return PlainTextResponse(f"a form is at most {FORM_BYTES} bytes\n", 413)
    body = raw.decode("utf-8", "replace")
    form = {k: v[0].strip() for k, v in parse_qs(body).items() if v}
    if not explorer.auth.form_token_valid(request, form.get("csrf")):
        return PlainTextResponse("this form is not from a page of your session\n", 403)
    run_id, verb = request.path_params["run_id"], form.get("verb", "")
    tenant = session[1].tenant
    version = form.get("version", "")
    if verb not in VERBS or whole_number(version) is None or not form.get("by"):
        return PlainTextResponse("a command needs a verb, the observed version and --by\n", 400)
    if await run_in_threadpool(_run_row, explorer, tenant, run_id) is None:
        return _not_found(run_id)
    notice = await run_in_threadpool(
        explorer.actions.send,
        tenant,
        run_id,
        verb,
        int(version),
        form["by"],
        form.get("digest") or None,
        form.get("reason") or None,
    )
    explorer.actions.keep(session[0], run_id, notice)
    return RedirectResponse(markup.run_href(run_id) + "#actions", status_code=303)


# --- JSON and downloads ------------------------------------------------------------------------
def verify(request: Request, tenant: str) -> Response:
    explorer = _explorer(request)
    run_id = request.path_params["run_id"]
    if _run_row(explorer, tenant, run_id) is None:
        return JSONResponse({"error": "no such run"}, status_code=404)
    result = proof.verify_now(explorer.sources, tenant, run_id)
    explorer.verdicts.record(tenant, run_id, result)
    inclusion = proof.inclusion_after_verify(explorer.sources, tenant, run_id, result)
    return JSONResponse({**result.to_json(), "inclusion": inclusion})


def _file_name(run_id: str) -> str:
    """The run ID as a download's file name: ASCII letters and digits and ``-_.``, anything
    else ``_`` (a header is Latin-1: ``str.isalnum`` is true of ``日`` and ``²`` too)."""
    return "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "_" for c in run_id)


def export(request: Request, tenant: str) -> Response:
    run_id = request.path_params["run_id"]
    links = _explorer(request).sources.audit().load_chain(tenant, run_id)
    if not links:
        return JSONResponse({"error": "no such run"}, status_code=404)
    name = _file_name(run_id)
    return Response(
        b"".join(export_lines(links)),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{name}.links.jsonl"'},
    )


def bundle(request: Request, tenant: str) -> Response:
    """The run's offline proof bundle: the bytes ``runtrail audit bundle --run`` writes."""
    run_id = request.path_params["run_id"]
    try:
        body = proof.bundle_bytes(_explorer(request).sources, tenant, run_id)
    except NoProof as exc:
        return JSONResponse({"error": str(exc)}, status_code=404)
    name = _file_name(run_id)
    return Response(
        body,
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{name}.bundle.json"'},
    )


def link_json(request: Request, tenant: str) -> Response:
    """One sealed link (its event as written), for the timeline's data on demand."""
    run_id = request.path_params["run_id"]
    index = whole_number(request.path_params["index"])
    if index is None:  # a number the store's integer column cannot hold is no link either
        return JSONResponse({"error": "index is not a link index (0, 1, …)"}, status_code=400)
    try:
        link = _explorer(request).sources.audit().link_at(tenant, run_id, index)
    except MalformedLink as exc:
        return JSONResponse({"error": str(exc)}, status_code=422)
    if link is None:
        return JSONResponse({"error": "no such link"}, status_code=404)
    return Response(to_json(link.to_json()), media_type="application/json")


def node_io(request: Request, tenant: str) -> Response:
    """A node's captured input and raw output, for the node card's prompt and raw response."""
    record = _record(
        _explorer(request), tenant, request.path_params["run_id"], request.path_params["record_id"]
    )
    if record is None:
        return JSONResponse({"error": "no such node"}, status_code=404)
    return Response(
        to_json({"inputs": record.inputs, "outputs": record.outputs}),
        media_type="application/json",
    )


def node_prompt(request: Request, tenant: str) -> Response:
    """A MODEL node's prompt as chat messages (an HTML fragment, escaped like every page)."""
    record = _record(
        _explorer(request), tenant, request.path_params["run_id"], request.path_params["record_id"]
    )
    if record is None:
        return HTMLResponse("<p>no such node</p>", status_code=404)
    return HTMLResponse(markup.chat_html(chat.prompt_messages(record.inputs)))


def verifier_download(request: Request, tenant: str) -> Response:
    path = _explorer(request).verifier()
    if path is None:
        return PlainTextResponse("the standalone verifier is not installed here", 404)
    return FileResponse(path, media_type="text/x-python", filename="verify_audit_export.py")


class NodesUnreadable(Exception):
    """The run's captured records cannot be read (a line that is no record, a file the
    explorer may not open): the node routes answer 500 naming it, not a bare traceback."""


def _record(explorer: Explorer, tenant: str, run_id: str, record_id: str) -> Any:
    try:
        records = timeline.node_records(explorer.sources, tenant, run_id)
    except (CaptureReadError, OSError) as exc:
        log.warning("ui: capture records of %s: %s", run_id, exc)
        raise NodesUnreadable(
            f"the captured records of run {run_id} cannot be read: {exc}"
        ) from exc
    for record in records:
        if record.record_id == record_id:
            return record
    return None


def _nodes_unreadable(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=500)


def node_editable(request: Request, tenant: str) -> Response:
    """A MODEL node's captured prompt split for the replay editor: conversation, parameters."""
    record = _record(
        _explorer(request), tenant, request.path_params["run_id"], request.path_params["record_id"]
    )
    if record is None:
        return JSONResponse({"error": "no such node"}, status_code=404)
    return Response(to_json(replay.editable(record)), media_type="application/json")


async def replay_node(request: Request) -> Response:
    """Mock or live replay; a live one may carry the operator's edit of the prompt as a JSON
    body (JSON only: a cross-site form cannot send it without the browser asking first)."""
    tenant = _tenant(request)
    if tenant is None:
        return JSONResponse({"error": "a valid bearer token is required"}, status_code=401)
    body = await body_within(request, DEFAULT_MAX_EVENT_BYTES)
    if body is None:
        return JSONResponse({"error": f"an edit is at most {DEFAULT_MAX_EVENT_BYTES} bytes"}, 413)
    edit = None
    if body:
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return JSONResponse({"error": "an edited replay is sent as application/json"}, 415)
        try:
            edit = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return JSONResponse({"error": f"the edit is not JSON: {exc}"}, status_code=400)
    return await run_in_threadpool(_replay, request, tenant, edit)


def _replay(request: Request, tenant: str, edit: Any) -> Response:
    explorer = _explorer(request)
    run_id, record_id = request.path_params["run_id"], request.path_params["record_id"]
    mode = request.path_params["mode"]
    if mode not in ("mock", "live"):
        return JSONResponse({"error": "not found"}, status_code=404)
    record = _record(explorer, tenant, run_id, record_id)
    if record is None:
        return JSONResponse({"error": "no such node"}, status_code=404)
    try:
        if mode == "mock":
            answer = replay.mock(record)
        elif explorer.model_client is None:
            return JSONResponse({"error": "live replay is off: no model client"}, 403)
        else:
            answer = replay.live(record, explorer.model_client, edit)
    except (ReplayError, FactoryError) as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    return Response(to_json(answer), media_type="application/json")


def live_stream(request: Request) -> Response:
    explorer = _explorer(request)
    tenant = explorer.auth.tenant(request)
    if tenant is None:
        return JSONResponse({"error": "a valid bearer token is required"}, status_code=401)
    run_id = request.path_params["run_id"]
    if _run_row(explorer, tenant, run_id) is None:
        return JSONResponse({"error": "no such run"}, status_code=404)
    resumed = live.parse_position(request.headers.get("last-event-id"))
    start = live.parse_position(request.query_params.get("from"))
    partition = explorer.partitions.of(run_id)
    if partition is None:
        return JSONResponse({"error": "the events topic cannot be reached"}, status_code=503)
    if resumed is not None and resumed[0] == partition:
        offset = resumed[1] + 1
    elif start is not None and start[0] == partition:
        offset = start[1]
    else:
        offset = 0
    return StreamingResponse(
        explorer.hub.stream(tenant, run_id, partition, offset),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def healthz(request: Request) -> Response:
    return PlainTextResponse("ok\n")


def home(request: Request) -> Response:
    return RedirectResponse("/runs", status_code=303)


def build_app(
    sources: Sources,
    auth: Auth,
    hosts: frozenset[str] | None = None,
    prices: PriceTable | None = None,
) -> Starlette:
    """The explorer's app; ``hosts`` are the ``Host`` names it answers (None: any)."""
    static = StaticFiles(directory=str(files("runtrail_tools.ui") / "static"))
    routes = [
        Route("/", home),
        Route("/healthz", healthz),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/runs", _html_auth(runs_list)),
        Route("/live/runs", runs_live),
        Route("/live/rows.json", _api_auth(runs_rows)),
        Route("/verifier.py", _api_auth(verifier_download)),
        Route("/runs/{run_id}", _html_auth(run_view)),
        Route("/runs/{run_id}/verify", _api_auth(verify), methods=["POST"]),
        Route("/runs/{run_id}/commands", run_command, methods=["POST"]),
        Route("/runs/{run_id}/export.jsonl", _api_auth(export)),
        Route("/runs/{run_id}/bundle.json", _api_auth(bundle)),
        Route("/runs/{run_id}/live", live_stream),
        Route("/runs/{run_id}/view.json", _api_auth(run_live_view)),
        Route("/runs/{run_id}/links/{index}", _api_auth(link_json)),
        Route("/runs/{run_id}/nodes/{record_id}", _api_auth(node_io)),
        Route("/runs/{run_id}/nodes/{record_id}/prompt", _api_auth(node_prompt)),
        Route("/runs/{run_id}/nodes/{record_id}/editable", _api_auth(node_editable)),
        Route(
            "/runs/{run_id}/nodes/{record_id}/{mode:str}",
            replay_node,
            methods=["POST"],
        ),
        Mount("/static", app=static, name="static"),
    ]

    hub = live.LiveHub(sources.settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        hub.close()
        sources.close()

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        middleware=[Middleware(Guard, hosts=hosts)],
        exception_handlers={NodesUnreadable: _nodes_unreadable},
    )
    app.state.explorer = Explorer(
        sources,
        auth,
        live.Partitions(sources.settings),
        hub,
        Chains(),
        proof.Verdicts(),
        Actions(sources.ui.command_url, auth.tokens),
        prices,
    )
    return app
