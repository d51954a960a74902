"""The command API's routes (Starlette), every one scoped to the tenant of the bearer token.

* ``GET /v1/runs/{run}`` — version, status, projection and the commands allowed from it;
* ``GET /v1/runs/{run}/events?after=N&resolve=…`` — the run's events after sequence N, their
  protected content opened for the token's tenant (``[erased]`` where it was erased), or as
  written (references) with ``resolve=false`` (or ``0``; any other value than ``true``, ``1``,
  ``false``, ``0`` is a 400);
* ``POST /v1/runs/{run}/commands`` — ``{name, expectedVersion, idempotencyKey, actor?, data,
  correlationId?, causationEventId?}``: 200 accepted (or the first outcome of a duplicate),
  409 stale or idempotency conflict (the body carries the current version), 422 refused
  (invalid transition, terminal or cancelled run, malformed data), 400 a body that is not a
  command (not UTF-8 JSON, an object nested deeper or a number larger than an event holds,
  NaN or Infinity), 401 without a valid token, 413 a body over the limit, 415 a body declared
  as another media type than JSON or sent compressed;
* ``POST /v1/runs/{run}/resume`` — the resume protocol (:mod:`runtrail.commands.resume`):
  422 for a run that cannot resume.

The store protects what it records (:class:`~runtrail.commands.store.EventStore`'s
``protector``): events are kept, relayed and sealed with references in place of protected
content. The answers a caller reads — an outcome's events, the run's events — open them for
the tenant of the token, with the same :class:`~runtrail.privacy.resolve.Resolver` every
other reader uses.

The store is synchronous (one transaction per command): calls run in Starlette's threadpool.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from runtrail.commands import Command, EventStore
from runtrail.commands.catalog import allowed_commands
from runtrail.commands.resume import ResumeRefused, resume_run
from runtrail.events import loads_strict
from runtrail.events.errors import EventError
from runtrail.events.limits import EventLimits
from runtrail.http_server import TokenAuth
from runtrail.privacy.resolve import Resolver
from runtrail.whole_numbers import whole_number
from runtrail_services.http_body import body_within

#: Refusal codes answered 409 (the caller reloads and decides); every other refusal is 422.
CONFLICT_CODES = frozenset({"stale", "idempotency-conflict"})
DEFAULT_ACTOR = {"kind": "service", "id": "command-api"}
#: The values of ``?resolve=`` on the events route and what they mean (empty: absent, resolve).
RESOLVE_VALUES = {"true": True, "1": True, "false": False, "0": False, "": True}


def _error(status: int, code: str, reason: str) -> JSONResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="runtrail-commands"'} if status == 401 else None
    return JSONResponse({"code": code, "reason": reason}, status_code=status, headers=headers)


def _not_json(request: Request) -> str | None:
    """Why the body is not to be read as JSON (a declared media type other than JSON, a
    Content-Encoding); None to read it. A body without a Content-Type is read as JSON."""
    declared = request.headers.get("content-type")
    kind = (declared or "").split(";", 1)[0].strip().lower()
    if declared is not None and kind != "application/json" and not kind.endswith("+json"):
        return f"Content-Type {declared!r}: a command is application/json"
    coding = request.headers.get("content-encoding")
    if coding is not None and coding.strip().lower() != "identity":
        return f"Content-Encoding {coding!r}: a command is sent uncompressed"
    return None


def _parse_json(body: bytes) -> Any:
    """The body as JSON, or ValueError/EventError saying why not: UTF-8 only (a leading byte
    order mark is skipped, UTF-16 is not guessed); duplicate keys and NaN/Infinity refused by
    :func:`loads_strict`; a body nested deeper than the parser recurses (100,000 ``[``)."""
    try:
        return loads_strict(body.decode("utf-8-sig"))
    except RecursionError:
        raise ValueError("the JSON is nested too deep") from None


def _check_holdable(given: Any, limits: EventLimits) -> None:
    """ValueError/EventError for what the store cannot keep as written: a number that
    overflowed to Infinity (``1e400``), nesting past the event limit, an integer past 64 bits
    or a lone surrogate (the store's encoder refuses those two)."""
    limits.check_value(given, "body")
    try:
        orjson.dumps(given)
    except orjson.JSONEncodeError as exc:
        raise ValueError(str(exc)) from None


def build_app(
    store: EventStore,
    auth: TokenAuth,
    *,
    max_body_bytes: int = 1024 * 1024,
    limits: EventLimits | None = None,
    resolver: Resolver | None = None,
) -> Starlette:
    """The API on ``store``; ``auth`` maps bearer tokens to tenants; a command's body must fit
    ``limits`` (nesting depth; the default limits when None); ``resolver`` opens the protected
    content of the events it answers with (None: no content store, a reference reads as
    ``[erased]``)."""
    limits = limits or EventLimits()
    opener = resolver or Resolver(None)

    def opened(tenant: str, forms: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The events with their references opened for ``tenant`` (a reader entitled to it)."""
        return [opener.value(tenant, form) for form in forms]

    def tenant_of(request: Request) -> str | None:
        return auth.tenant_of(request.headers.get("authorization"))

    async def show(request: Request) -> Response:
        tenant = tenant_of(request)
        if tenant is None:
            return _error(401, "unauthorized", "a valid bearer token is required")
        run = request.path_params["run"]
        version, state = await run_in_threadpool(store.load, tenant, run)
        if state is None:
            return _error(404, "not-found", f"no run {run} for this tenant")
        return JSONResponse(
            {
                "tenantId": tenant,
                "runId": run,
                "version": version,
                "status": state.status,
                "state": state.json_form(),
                "allowedCommands": allowed_commands(state),
            }
        )

    async def events(request: Request) -> Response:
        tenant = tenant_of(request)
        if tenant is None:
            return _error(401, "unauthorized", "a valid bearer token is required")
        after = whole_number(request.query_params.get("after", "0"))
        if after is None:
            return _error(400, "bad-request", "after must be a sequence number")
        flag = request.query_params.get("resolve", "").lower()
        if flag not in RESOLVE_VALUES:  # never read an unknown value as either
            return _error(400, "bad-request", "resolve is true, 1, false or 0")
        forms = await run_in_threadpool(
            store.stored_events, tenant, request.path_params["run"], after
        )
        if RESOLVE_VALUES[flag]:
            forms = await run_in_threadpool(opened, tenant, forms)
        return JSONResponse({"events": forms})

    async def execute(request: Request) -> Response:
        tenant = tenant_of(request)
        if tenant is None:
            return _error(401, "unauthorized", "a valid bearer token is required")
        refused = _not_json(request)
        if refused is not None:
            return _error(415, "unsupported-media-type", refused)
        body = await body_within(request, max_body_bytes)
        if body is None:
            return _error(413, "too-large", f"the body is over {max_body_bytes} bytes")
        try:
            given: Any = _parse_json(body)
            if not isinstance(given, dict):
                raise ValueError("a command is a JSON object")
            command = Command.model_validate(
                {
                    "actor": DEFAULT_ACTOR,
                    **given,
                    "tenantId": tenant,
                    "runId": request.path_params["run"],
                }
            )
            _check_holdable(given, limits)
        except (ValueError, ValidationError, EventError) as exc:
            return _error(400, "bad-request", f"not a command: {exc}")
        outcome = await run_in_threadpool(store.execute, command)
        status = 200 if outcome.accepted else 409 if outcome.code in CONFLICT_CODES else 422
        answer = outcome.model_dump(mode="json", by_alias=True)
        if answer["events"]:  # kept with references: the caller reads them opened
            answer["events"] = await run_in_threadpool(opened, tenant, answer["events"])
        return JSONResponse(answer, status_code=status)

    async def resume(request: Request) -> Response:
        tenant = tenant_of(request)
        if tenant is None:
            return _error(401, "unauthorized", "a valid bearer token is required")
        try:
            report = await run_in_threadpool(resume_run, store, tenant, request.path_params["run"])
        except ResumeRefused as exc:
            return _error(422, exc.code, exc.reason)
        return JSONResponse(report.json_form())

    return Starlette(
        routes=[
            Route("/v1/runs/{run}", show, methods=["GET"]),
            Route("/v1/runs/{run}/events", events, methods=["GET"]),
            Route("/v1/runs/{run}/commands", execute, methods=["POST"]),
            Route("/v1/runs/{run}/resume", resume, methods=["POST"]),
        ]
    )
