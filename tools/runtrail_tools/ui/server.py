"""Serving the explorer on uvicorn: bind first (so port 0 gets a real port to print), then
serve on that socket until SIGINT/SIGTERM (uvicorn's own handlers stop it cleanly)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable

import uvicorn

from runtrail.config import Settings
from runtrail_tools.cli.capture_cmd import FactoryError, load_factory
from runtrail_tools.ui.app import build_app
from runtrail_tools.ui.auth import Auth
from runtrail_tools.ui.cost import PriceTableError, load_prices
from runtrail_tools.ui.guard import allowed_hosts
from runtrail_tools.ui.settings import UiSettings
from runtrail_tools.ui.sources import Sources, stack_tokens_file


def explorer_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve(settings: Settings, ui: UiSettings, say: Callable[[str], None] = print) -> int:
    if ui.tokens_file is None and not ui.tokens:
        found = stack_tokens_file(settings.state_dir)
        ui = ui.model_copy(update={"tokens_file": found})
    if ui.model_client is not None:
        try:  # a wrong spec fails here, naming it, not at the first live replay
            load_factory(ui.model_client, "--model-client")
        except FactoryError as exc:
            sys.stderr.write(f"runtrail ui: {exc}\n")
            return 2
    try:
        prices = load_prices(ui.price_table)
    except PriceTableError as exc:
        sys.stderr.write(f"runtrail ui: {exc}\n")
        return 2
    tokens = ui.tenant_tokens()
    if not tokens:
        say(
            "runtrail ui: no tokens configured (RUNTRAIL_UI_TOKENS / --tokens-file): nobody can sign in"
        )
    family = socket.AF_INET6 if ":" in ui.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((ui.host, ui.port))
    sock.listen(128)  # connections wait in the backlog until uvicorn serves: the URL works now
    port = int(sock.getsockname()[1])
    sources = Sources(settings, ui)
    hosts = allowed_hosts(ui.host, ui.allowed_hosts)
    if hosts is None:
        say("runtrail ui: bound to every address with no --allowed-host: any Host is answered")
    app = build_app(sources, Auth(tokens), hosts, prices)
    # open live streams never end on their own: a stop waits at most this long for them
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=3
    )
    server = uvicorn.Server(config)
    say(f"runtrail ui: {explorer_url(ui.host, port)} (tenants: {', '.join(sorted(tokens))})")
    sys.stdout.flush()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0
