"""The explorer's per-run routes over real HTTP (one real ``runtrail ui`` process on seeded
stores, following a real events topic, beside a real command API; no browser): each route
asked for another tenant's run, with malformed path and query values, and with no, a wrong or
a signed-out credential.

Tenants ``acme`` and ``globex`` both have a run called ``shared`` (with their own node
records and events), so a route that looked a run up by its ID alone, or a stream that
filtered by key alone, would hand one tenant the other's.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from runtrail.audit.tile_store import FileTileStore
from runtrail.capture import JsonlFileSink, NodePairer
from runtrail.commands.client import CommandClient
from runtrail.events import validate_json_form
from runtrail.kafka.topics import delete_topics, wait_for_topics
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail_services.audit.settings import AuditSettings
from runtrail_services.audit.signing import load_or_create_signer
from runtrail_services.audit.transparency import LogPublisher
from runtrail_tools.demo.replay_model import FACTORY
from tests.capture_support import feed_all
from tests.commands_support import serving_command_api
from tests.projection_support import CODEC, Run
from tests.test_ui_actions import DIGEST, CommandRun, awaiting_approval
from tests.ui_stores import seed, serving, sign_tree_head

TOKENS = {"acme": "acme-token", "globex": "globex-token", "initech": "initech-token"}
#: what only acme's run holds: none of it may reach globex
SECRET = "acme-secret-prompt"
#: a run ID of characters past Latin-1 (an envelope's run ID is any non-blank text)
WIDE = "run-日本-²"


def model_run(run_id: str, tenant: str, words: str) -> Run:
    """Accepted, then one model call whose prompt says ``words`` (its step closed: a node)."""
    run = Run(run_id, tenant)
    run.add("run.accepted", {"goalRef": f"goal://{words}", "policyVersion": "p-1"})
    prompt = {"model": "m", "messages": [{"role": "user", "content": words}]}
    run.add("MODEL_REQUEST", {"prompt": prompt}, turn_id="turn-1", step=1)
    run.add(
        "MODEL_RESPONSE", {"message": f"{words} answered", "raw": None}, turn_id="turn-1", step=1
    )
    run.add("STEP_END", {"reason": "end_turn"}, turn_id="turn-1", step=1)
    return run


@dataclass(frozen=True)
class Served:
    port: int
    bootstrap: str
    topic: str
    #: run → its MODEL record's ID, per tenant
    records: dict[tuple[str, str], str]
    api: str

    def client(self, tenant: str) -> CommandClient:
        return CommandClient(self.api, TOKENS[tenant])


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, kafka_admin: AdminClient
) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("ui-routes")
    state = root / "state"
    state.mkdir()
    runs = [
        model_run("a-1", "acme", SECRET),
        model_run("shared", "acme", SECRET),
        model_run("g-1", "globex", "globex-own-prompt"),
        model_run("shared", "globex", "globex-own-prompt"),
        model_run(WIDE, "acme", "wide"),
        model_run("i-1", "initech", "initech-own-prompt"),
    ]
    seed(state, runs)
    sink = JsonlFileSink(state / "capture")
    records: dict[tuple[str, str], str] = {}
    for run in runs:
        written = feed_all(NodePairer(), run.events)
        sink.write(written)
        records[(run.tenant, run.run_id)] = next(
            r.record_id for r in written if r.node_type == "MODEL"
        )
    sink.close()
    for written_file in (state / "capture" / "initech").rglob("*.jsonl"):
        with written_file.open("a") as lines:  # a complete line that is no record
            lines.write('{"runId": "i-1", "recordId": 7}\n')
    sign_tree_head(state)
    audit = AuditSettings()  # a log checkpoint, so acme's own bundle is a 200
    signer = load_or_create_signer(audit.resolved_key_path(state), audit.key_name)
    store = open_store(AUDIT_LINKS, sqlite_url(state / "audit.db"))
    try:
        tiles = FileTileStore(root / "tlog")
        assert LogPublisher(store, signer, audit.log_origin, tiles, None, 0).publish()
    finally:
        store.close()
    topic = f"ui-routes-{uuid.uuid4().hex[:8]}"
    kafka_admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(timeout=30)
    wait_for_topics(kafka_admin, [topic], timeout=30)
    commands = sqlite_url(root / "commands.db")
    try:
        with serving_command_api(commands, TOKENS) as api:
            command_runs = []
            for tenant, run_id in (("acme", "c-1"), ("globex", "gc-1")):
                client = CommandClient(api, TOKENS[tenant])
                awaiting_approval(client, run_id)
                events = [validate_json_form(e) for e in client.events(run_id)]
                command_runs.append(CommandRun(run_id, tenant, events))
            seed(state, command_runs)
            flags = ["--model-client", FACTORY, "--command-url", api, "--command-store", commands]
            flags += ["--bootstrap-servers", kafka_bootstrap, "--events-topic", topic]
            with serving(state, TOKENS, root / "ui.log", *flags) as url:
                port = urlsplit(url).port
                assert port is not None
                yield Served(port, kafka_bootstrap, topic, records, api)
    finally:
        delete_topics(kafka_admin, [topic])


def call(
    port: int,
    method: str,
    path: str,
    token: str | None = "acme-token",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request; a server-sent-events answer is read only up to its first message."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    sent = {"Authorization": f"Bearer {token}"} if token is not None else {}
    sent.update(headers or {})
    try:
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        head = {k.lower(): v for k, v in response.getheaders()}
        if head.get("content-type", "").startswith("text/event-stream"):
            return response.status, head, response.readline() + response.readline()
        return response.status, head, response.read()
    finally:
        conn.close()


def tells_nothing_of_acme(body: bytes) -> bool:
    return SECRET.encode() not in body and b"MODEL_REQUEST" not in body


# --- tenant scoping ----------------------------------------------------------------------------
def node_routes(run_id: str, record_id: str) -> list[tuple[str, str]]:
    """A node's routes: its input and output, its prompt, its editor, mock and live replay."""
    return [
        ("GET", f"/runs/{run_id}/nodes/{record_id}"),
        ("GET", f"/runs/{run_id}/nodes/{record_id}/editable"),
        ("GET", f"/runs/{run_id}/nodes/{record_id}/prompt"),
        ("POST", f"/runs/{run_id}/nodes/{record_id}/mock"),
        ("POST", f"/runs/{run_id}/nodes/{record_id}/live"),
    ]


def per_run_routes(run_id: str, record_id: str) -> list[tuple[str, str]]:
    return [
        ("GET", f"/runs/{run_id}/bundle.json"),
        ("POST", f"/runs/{run_id}/verify"),
        ("GET", f"/runs/{run_id}/live"),
        *node_routes(run_id, record_id),
    ]


def test_another_tenants_run_and_node_answer_404_on_every_route(served: Served) -> None:
    """globex's token naming acme's run (and its node) gets a 404 and none of its content on
    every per-run route; acme's own token gets each of them (so the 404 is the tenant check,
    not a missing run)."""
    run_id = "a-1"
    record = served.records[("acme", run_id)]
    for method, path in per_run_routes(run_id, record):
        status, _, body = call(served.port, method, path)
        assert status == 200, (path, status, body[:300])
        status, _, body = call(served.port, method, path, token="globex-token")
        assert status == 404, (path, status, body[:300])
        assert tells_nothing_of_acme(body), (path, body[:300])


@pytest.mark.parametrize("run_id", ["g-1", "shared"])
def test_another_tenants_node_under_ones_own_run_is_a_404(served: Served, run_id: str) -> None:
    """An acme record ID asked under globex's own run (of another ID, or of the same ID as
    acme's run) is no node of that run: 404, never acme's prompt."""
    acme_record = served.records[("acme", "shared")]
    own = served.records[("globex", run_id)]
    for method, path in node_routes(run_id, acme_record):
        status, _, body = call(served.port, method, path, token="globex-token")
        assert status == 404, (path, status, body[:300])
        assert tells_nothing_of_acme(body), (path, body[:300])
        status, _, body = call(served.port, method, path.replace(acme_record, own), "globex-token")
        assert status == 200, (path, status, body[:300])


def test_rows_json_and_the_runs_stream_name_only_the_tokens_runs(served: Served) -> None:
    """``/live/rows.json`` returns globex's rows only; ``/live/runs`` following acme's and
    globex's runs names a run of globex's when its event arrives, never acme's."""
    status, _, body = call(
        served.port, "GET", "/live/rows.json?run=a-1&run=shared&run=g-1", "globex-token"
    )
    assert status == 200 and set(json.loads(body)) == {"shared", "g-1"}
    assert tells_nothing_of_acme(body)
    query = urlencode([("run", "a-1"), ("run", "shared"), ("run", "g-1")])
    with Stream(served.port, f"/live/runs?{query}", "globex-token") as stream:
        produce(served, "acme", "a-1", 50)
        produce(served, "acme", "shared", 51)
        produce(served, "globex", "g-1", 52)
        named = stream.until(lambda data: data.get("runId") == "g-1")
    assert [d["runId"] for d in named] == ["g-1"], named


def test_the_run_stream_sends_only_the_tokens_events(served: Served) -> None:
    """globex following its own run ``shared`` gets its own event of it, not acme's event of
    the run of the same ID (the topic's key is the run ID alone)."""
    with Stream(served.port, "/runs/shared/live", "globex-token") as stream:
        produce(served, "acme", "shared", 60, SECRET)
        produce(served, "globex", "shared", 61, "globex-own")
        sent = stream.until(lambda data: data.get("tenantId") == "globex")
    assert [(d["tenantId"], str(d["sequence"])) for d in sent] == [("globex", "61")], sent


def test_a_stream_reading_back_from_the_topic_sends_only_the_tokens_events(
    served: Served,
) -> None:
    """A stream that starts before the hub's position (``from``, or ``Last-Event-ID`` on a
    reconnect) reads that gap with a consumer of its own: it too sends globex none of acme's
    events of the run of the same ID."""
    produce(served, "acme", "shared", 70, SECRET)
    produce(served, "globex", "shared", 71, "globex-own")
    with Stream(served.port, "/runs/shared/live", "globex-token") as stream:  # the hub is past
        stream.until(lambda data: str(data.get("sequence")) == "71")
    for headers in ({}, {"Last-Event-ID": "0:-1"}):
        path = "/runs/shared/live" + ("" if headers else "?from=0:0")
        with Stream(served.port, path, "globex-token", headers) as stream:
            sent = stream.until(lambda data: str(data.get("sequence")) == "71")
        assert {d["tenantId"] for d in sent} == {"globex"}, (headers, sent)
        assert SECRET.encode() not in json.dumps(sent).encode()


def test_a_command_for_another_tenants_run_is_refused_and_not_sent(served: Served) -> None:
    """globex's browser session, with its own page's form token, posting approve for acme's
    run waiting for approval: 404 and the run is untouched in the command API."""
    cookie = sign_in(served.port, "globex-token")
    csrf = form_token(served.port, cookie, "gc-1")
    form = {"csrf": csrf, "verb": "approve", "version": "2", "digest": DIGEST, "by": "mallory"}
    status, _, body = post_form(served.port, "/runs/c-1/commands", form, cookie)
    assert status == 404, (status, body[:300])
    run = served.client("acme").run("c-1")
    assert run is not None and run["version"] == 2 and run["status"] == "awaiting_approval"


# --- malformed values --------------------------------------------------------------------------
BAD_VALUES = {
    "superscript": quote("²"),
    "huge": str(10**30),
    "digits past int()": "9" * 5000,
    "empty-ish": "%20",
    "long": "x" * 5000,
    "encoded slash": "a%2Fb",
    "NUL": "a%00b",
    "not UTF-8": "%FF",
}


def malformed_routes(value: str) -> list[tuple[str, str]]:
    return [
        ("GET", f"/runs/{value}/bundle.json"),
        ("GET", f"/runs/a-1/nodes/{value}"),
        ("GET", f"/runs/{value}/nodes/{value}"),
        ("GET", f"/runs/a-1/nodes/{value}/editable"),
        ("GET", f"/runs/a-1/nodes/{value}/prompt"),
        ("POST", f"/runs/{value}/verify"),
        ("GET", f"/runs/{value}/live"),
        ("GET", f"/runs/a-1/live?from={value}"),
        ("GET", f"/runs/{value}/view.json?since={value}"),
        ("GET", f"/runs/a-1/links/{value}"),
        ("GET", f"/live/rows.json?run={value}"),
        ("GET", f"/live/runs?run={value}&from={value}"),
        ("POST", f"/runs/a-1/nodes/{value}/mock"),
        ("POST", f"/runs/a-1/nodes/{value}/{value}"),
    ]


@pytest.mark.parametrize("value", list(BAD_VALUES.values()), ids=list(BAD_VALUES))
def test_a_malformed_value_is_never_a_500_nor_a_dropped_connection(
    served: Served, value: str
) -> None:
    """Every route answers a malformed run ID, record ID, position or number with an answer
    (a 4xx, or an empty one), never a 500 or a closed connection."""
    for method, path in malformed_routes(value):
        try:
            status, _, body = call(served.port, method, path)
        except (http.client.HTTPException, OSError) as exc:
            pytest.fail(f"{method} {path[:80]}: no answer: {exc!r}")
        assert status < 500, (method, path[:80], status, body[:300])


BAD_INDEXES = {"2^63": str(2**63), "10^30": str(10**30), "5000 digits": "9" * 5000,
               "letters": "abc", "superscript": quote("²"), "negative": "-1"}  # fmt: skip


@pytest.mark.parametrize("index", list(BAD_INDEXES.values()), ids=list(BAD_INDEXES))
def test_a_link_index_that_is_no_index_is_refused_naming_it(served: Served, index: str) -> None:
    """``/links/{index}`` took the path's digits with Starlette's ``int`` convertor: past
    2^63 the store raised ``OverflowError`` and past 4,300 digits ``int()`` raised while
    routing, both a 500; ``²`` or ``abc`` were a bare "Not Found" naming nothing."""
    status, _, body = call(served.port, "GET", f"/runs/a-1/links/{index}")
    assert status == 400, (index, status, body[:300])
    assert b"index" in body


def test_the_largest_link_index_is_no_link(served: Served) -> None:
    """The check refuses no index the store can hold: the largest is a plain 404, and link 0
    is still acme's first event."""
    assert call(served.port, "GET", f"/runs/a-1/links/{2**63 - 1}")[0] == 404
    status, _, body = call(served.port, "GET", "/runs/a-1/links/0")
    assert status == 200 and json.loads(body)["event"]["type"] == "run.accepted"


@pytest.mark.parametrize("version", [quote("²"), str(10**30), "", "-1", "x" * 5000])
def test_a_command_with_a_malformed_version_is_refused_naming_it(
    served: Served, version: str
) -> None:
    """The observed version of a command is a whole number: anything else is a 400 naming
    it, and nothing reaches the command API."""
    cookie = sign_in(served.port, "acme-token")
    csrf = form_token(served.port, cookie, "c-1")
    form = {"csrf": csrf, "verb": "approve", "digest": DIGEST, "by": "alice"}
    body = urlencode(form) + f"&version={version}"
    status, _, answer = post_form(served.port, "/runs/c-1/commands", body, cookie)
    assert status == 400 and b"version" in answer, (status, answer[:300])
    run = served.client("acme").run("c-1")
    assert run is not None and run["version"] == 2


# --- credentials -------------------------------------------------------------------------------
def credentials(served: Served) -> dict[str, dict[str, str]]:
    cookie = sign_in(served.port, "acme-token")
    call(served.port, "POST", "/logout", None, headers={"Cookie": cookie})
    return {
        "none": {},
        "wrong token": {"Authorization": "Bearer acme-token-not"},
        "empty bearer": {"Authorization": "Bearer "},
        "another scheme": {"Authorization": "Basic acme-token"},
        "signed-out cookie": {"Cookie": cookie},
        "made-up cookie": {"Cookie": "runtrail_session=" + "A" * 43},
    }


WHO = (
    "none",
    "wrong token",
    "empty bearer",
    "another scheme",
    "signed-out cookie",
    "made-up cookie",
)


@pytest.mark.parametrize("who", WHO)
def test_without_a_valid_credential_no_route_answers_data(served: Served, who: str) -> None:
    """No token, a wrong one, another scheme, a cookie of a session signed out or never
    opened: JSON and stream routes answer 401, pages send to the login form, a command is
    refused (403: commands come from a signed-in page); none says anything of the run."""
    headers = credentials(served)[who]
    record = served.records[("acme", "a-1")]
    routes = [
        *per_run_routes("a-1", record),
        ("GET", "/runs/a-1/view.json?since=0"),
        ("GET", "/runs/a-1/links/0"),
        ("GET", "/runs/a-1/export.jsonl"),
        ("GET", "/live/rows.json?run=a-1"),
        ("GET", "/live/runs?run=a-1"),
    ]
    for method, path in routes:
        status, _, body = call(served.port, method, path, None, headers=headers)
        assert status == 401, (who, path, status, body[:300])
        assert tells_nothing_of_acme(body) and b"a-1" not in body, (who, path, body[:300])
    for path in ("/runs", "/runs/a-1"):
        status, head, body = call(served.port, "GET", path, None, headers=headers)
        assert (status, head.get("location")) == (303, "/login"), (who, path, status)
        assert tells_nothing_of_acme(body)
    form = urlencode({"verb": "approve", "version": "2", "digest": DIGEST, "by": "x"})
    status, _, body = post_form(served.port, "/runs/c-1/commands", form, None, headers)
    assert status == 403, (who, status, body[:300])


# --- helpers -----------------------------------------------------------------------------------
def sign_in(port: int, token: str) -> str:
    """A browser session's cookie (``name=value``), from the login form."""
    status, head, _ = call(
        port,
        "POST",
        "/login",
        None,
        body=urlencode({"token": token}).encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 303
    return head["set-cookie"].split(";")[0]


def form_token(port: int, cookie: str, run_id: str) -> str:
    """The session's form token, from a run page of the tenant's that offers actions."""
    status, _, page = call(port, "GET", f"/runs/{run_id}", None, headers={"Cookie": cookie})
    assert status == 200
    found = re.search(rb'name="csrf" value="([^"]+)"', page)
    assert found, page[:500]
    return found.group(1).decode()


def post_form(
    port: int,
    path: str,
    form: dict[str, str] | str,
    cookie: str | None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    sent = {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})}
    if cookie is not None:
        sent["Cookie"] = cookie
    body = form if isinstance(form, str) else urlencode(form)
    return call(port, "POST", path, None, body=body.encode(), headers=sent)


def produce(served: Served, tenant: str, run_id: str, sequence: int, words: str = "x") -> None:
    """An event of ``tenant``'s run on the followed topic, keyed by the run ID."""
    event = Run(run_id, tenant).build(
        "MODEL_RESPONSE", {"message": words, "raw": None}, turn_id="turn-1", step=1
    )
    form = {**event.json_form(), "sequence": str(sequence), "eventId": str(uuid.uuid4())}
    producer = Producer({"bootstrap.servers": served.bootstrap})
    producer.produce(
        served.topic, key=run_id.encode(), value=CODEC.encode(validate_json_form(form))
    )
    assert producer.flush(30) == 0


#: How long a stream may take to deliver what a test waits for.
STREAM_S = 30.0


class Stream:
    """An open server-sent-events answer, read message by message with a deadline."""

    def __init__(
        self, port: int, path: str, token: str, headers: dict[str, str] | None = None
    ) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=STREAM_S)
        sent = {"Authorization": f"Bearer {token}", **(headers or {})}
        self._conn.request("GET", path, headers=sent)
        self._response = self._conn.getresponse()
        assert self._response.status == 200, self._response.read()[:300]
        # the stream is open (the hub assigned, this stream following) once its first line is
        assert self._response.readline().startswith(b"retry:")

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._conn.close()

    def until(self, last: Any) -> list[dict[str, Any]]:
        """The data of each message up to the first for which ``last`` is true."""
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + STREAM_S
        while time.monotonic() < deadline:
            line = self._response.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                seen.append(json.loads(line[len(b"data: ") :]))
                if last(seen[-1]):
                    return seen
        raise AssertionError(f"the stream did not send it within {STREAM_S} s: {seen}")


@pytest.mark.parametrize("route", ["bundle.json", "export.jsonl"])
def test_a_run_id_past_latin_1_downloads_under_an_ascii_name(served: Served, route: str) -> None:
    """The download's file name kept every character ``str.isalnum`` calls alphanumeric
    (``日``, ``²``) and was sent in a ``Content-Disposition`` header, which HTTP carries in
    Latin-1: the owner asking for the bundle or the export of such a run got a 500."""
    status, head, body = call(served.port, "GET", f"/runs/{quote(WIDE)}/{route}")
    assert status == 200, (status, body[:300])
    name = re.search(r'filename="([^"]*)"', head["content-disposition"])
    assert name is not None and name.group(1).isascii() and name.group(1).startswith("run-")
    assert WIDE.encode() in body or json.dumps(WIDE).encode() in body


@pytest.mark.parametrize("route", ["", "/prompt", "/editable"])
def test_a_node_whose_capture_files_cannot_be_read_is_an_answer_naming_it(
    served: Served, route: str
) -> None:
    """The node routes read the run's captured records without the run page's guard: a line
    that is no record ended in a bare "Internal Server Error" with no word of what failed."""
    record = served.records[("initech", "i-1")]
    status, _, body = call(served.port, "GET", f"/runs/i-1/nodes/{record}{route}", "initech-token")
    assert status == 500, body[:300]
    assert b"the captured records of run i-1 cannot be read" in body, body[:300]
