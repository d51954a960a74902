"""``runtrail ui``: the run explorer, a web page per run, on 127.0.0.1 by default.

With no broker or topic given, a stack that ``runtrail dev up`` started in the state folder
is followed (its broker and events topic, for live updates; its tokens file, for sign-in), so
``runtrail ui`` after ``runtrail demo`` opens the demo's runs.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from runtrail_tools.cli.common import add_common_flags, settings_from_args


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ui",
        help="serve the run explorer (web UI) on 127.0.0.1",
        description="Serve the run explorer: runs per tenant, a run's timeline, its audit "
        "proof, what a resume would use, node replay and live updates. Sign in with a "
        "tenant's bearer token (RUNTRAIL_UI_TOKENS / --tokens-file; the dev stack's by "
        "default).",
    )
    add_common_flags(parser, tenant=False)
    parser.add_argument("--host", help="bind address (RUNTRAIL_UI_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (RUNTRAIL_UI_PORT, default 9480; 0: any)")
    parser.add_argument("--tokens-file", type=Path, help="JSON {tenant: token}")
    parser.add_argument(
        "--allowed-host",
        action="append",
        dest="allowed_hosts",
        metavar="NAME",
        help="a Host name to answer besides the bound address's (repeatable; "
        "RUNTRAIL_UI_ALLOWED_HOSTS)",
    )
    parser.add_argument(
        "--model-client",
        metavar="MODULE:FACTORY",
        help="turns live replay on: FACTORY() returns an object with create(prompt)",
    )
    parser.add_argument(
        "--price-table",
        type=Path,
        metavar="FILE",
        help="JSON/TOML model → input/output price per 1M tokens: cost per node and per run "
        "(RUNTRAIL_UI_PRICE_TABLE)",
    )
    parser.add_argument(
        "--command-url",
        metavar="URL",
        help="the command API, for actions from a run's page (RUNTRAIL_UI_COMMAND_URL; "
        "default: the followed stack's)",
    )
    for name, what in (
        ("projection-store", "projection store URL"),
        ("audit-store", "audit link store URL"),
        ("capture-sink", "capture sink URL"),
        ("resume-cache-store", "resume-cache store URL"),
        ("sessions-store", "session store URL"),
        ("command-store", "command event store URL (refused commands)"),
    ):
        parser.add_argument(f"--{name}", metavar="URL", help=f"{what} (default: the service's)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runtrail_tools.devstack.state import StackState
    from runtrail_tools.ui.server import serve
    from runtrail_tools.ui.settings import UiSettings

    settings = settings_from_args(args)
    stack = StackState.load(settings.state_dir.expanduser().resolve())
    command_url = args.command_url
    if stack is not None:
        api = stack.services.get("command-api")
        if command_url is None and "RUNTRAIL_UI_COMMAND_URL" not in os.environ and api:
            command_url = api.api_url
        follow: dict[str, Any] = {}
        if args.bootstrap_servers is None and "RUNTRAIL_BOOTSTRAP_SERVERS" not in os.environ:
            follow["bootstrap_servers"] = stack.bootstrap_servers
        if args.events_topic is None and "RUNTRAIL_EVENTS_TOPIC" not in os.environ:
            follow["events_topic"] = stack.events_topic
        settings = settings.model_copy(update=follow)
    given = {
        "host": args.host,
        "port": args.port,
        "tokens_file": args.tokens_file,
        "allowed_hosts": args.allowed_hosts,
        "model_client": args.model_client,
        "command_url": command_url,
        "price_table": args.price_table,
        "projection_store_url": args.projection_store,
        "audit_store_url": args.audit_store,
        "capture_sink_url": args.capture_sink,
        "resume_cache_store_url": args.resume_cache_store,
        "sessions_store_url": args.sessions_store,
        "command_store_url": args.command_store,
    }
    ui = UiSettings(**{k: v for k, v in given.items() if v is not None})
    return serve(settings, ui)
