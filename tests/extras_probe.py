"""Run inside a venv holding the core and one extra (``tests/test_extras_install.py``).

Why a script of its own: each probe must run in that venv's interpreter (``python -I``), not
in the suite's, so it imports nothing from ``tests`` and prints one JSON object on stdout.

``demo STATE_DIR``: import what ``runtrail demo --up`` runs (each stack service) and open
every store it opens, as its processes do (the capture sink, the command API serving a
request, the outbox relay, the run explorer's sources, the demo's readers), on the embedded
defaults under ``STATE_DIR``.
``command-api STATE_DIR``: the command API serving a request and its outbox relay, alone.
``refusals``: what opening each kind of store at a ``postgresql://`` (an unreachable server)
and an ``s3://`` URL says: the extra missing, or the error of an adapter that is there.
``s3``: an ``s3://`` capture sink writing zstd objects opens.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from runtrail.extras import EXTRAS, MissingExtra
from runtrail.persistence.registry import UnsupportedStoreUrl, open_store

#: every kind of store (runtrail.persistence.kinds)
KINDS = (
    "projection",
    "audit",
    "commands",
    "resume-cache",
    "sessions",
    "checkpoints",
    "capture",
    "content",
    "keys",
)
#: what ``runtrail demo --up`` imports in its own process and in those it starts (the demo
#: agents, ``runtrail ui``, ``runtrail run``)
DEMO_MODULES = (
    "runtrail_tools.cli.main",
    "runtrail_tools.cli.demo_cmd",
    "runtrail_tools.cli.dev_cmd",
    "runtrail_tools.cli.run_cmd",
    "runtrail_tools.cli.ui_cmd",
    "runtrail_tools.cli.command_cmd",
    "runtrail_tools.demo.runner",
    "runtrail_tools.demo.agent",
    "runtrail_tools.demo.approval",
    "runtrail_tools.demo.report",
    "runtrail_tools.devstack.stack",
    "runtrail_tools.ui.server",
)
POSTGRES_URL = "postgresql://runtrail:secret@127.0.0.1:1/runtrail?connect_timeout=2"


def extras_imported() -> list[str]:
    return sorted({name.split(".")[0] for name in sys.modules} & set(EXTRAS))


def _serve_one_request(receiver: Any) -> int:
    """Run the command API, ask it for a run without a token, stop it: the HTTP status."""
    thread = threading.Thread(target=receiver.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{receiver.port}/v1/runs/nothing"
    deadline = time.monotonic() + 30
    status = 0
    while not status and time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=5)
        except urllib.error.HTTPError as exc:
            status = exc.code
        except OSError:
            time.sleep(0.1)
    receiver.request_stop()
    thread.join(30)
    return status


def command_api(settings: Any) -> int:
    """Open the command API and the outbox relay on their store; the API's answer to a
    request without a token."""
    from runtrail.runtime.registry import RECEIVERS

    receivers = {}
    for name, options in (("command-api", {"http_port": "0"}), ("outbox-relay", {})):
        module, _, attr = RECEIVERS[name].partition(":")
        cls = getattr(importlib.import_module(module), attr)
        receivers[name] = cls(settings, options=options, metrics_port=0)
    status = _serve_one_request(receivers["command-api"])
    receivers["outbox-relay"].store.close()
    return status


def demo(state_dir: Path) -> dict[str, Any]:
    from runtrail.config import Settings
    from runtrail.runtime.registry import SERVICES, service_class
    from runtrail_services.capture.settings import CaptureSettings
    from runtrail_tools.demo.readback import open_readers
    from runtrail_tools.demo.targets import Endpoint, Targets
    from runtrail_tools.devstack.stack import stack_names
    from runtrail_tools.ui.app import build_app
    from runtrail_tools.ui.auth import Auth
    from runtrail_tools.ui.settings import UiSettings
    from runtrail_tools.ui.sources import Sources

    for module in DEMO_MODULES:
        importlib.import_module(module)
    settings = Settings(state_dir=state_dir, bootstrap_servers="127.0.0.1:1")
    for name in SERVICES:  # (constructing one would ask the broker for its topics)
        service_class(name)
    capture_url = CaptureSettings.load().resolved_sink_url(state_dir)
    open_store("capture", capture_url).close()  # the capture service's sink
    status = command_api(settings)
    sources = Sources(settings, UiSettings())
    for opened in (
        sources.projections,
        sources.audit,
        sources.cache,
        sources.sessions,
        sources.commands,
    ):
        opened()
    build_app(sources, Auth({}))
    sources.close()
    endpoint = Endpoint("http://127.0.0.1:1/metrics", None)
    targets = Targets(settings=settings, services=dict.fromkeys(stack_names(), endpoint))
    with open_readers(targets) as readers:
        views = {
            "capture": readers.capture("default", "nothing"),
            "cache": readers.cache("default", "nothing"),
            "projection": readers.projection("default", "nothing"),
            "audit": readers.audit("default", "nothing"),
            "session": readers.session("default", "nothing"),
            "commands": readers.commands("default", "nothing"),
        }
        pending = readers.outbox_pending()
    return {
        "command_api_status": status,
        "views": {k: dataclasses.asdict(v) if v else None for k, v in views.items()},
        "outbox_pending": pending,
        "state": sorted(str(p.relative_to(state_dir)) for p in state_dir.iterdir()),
        "extras_imported": extras_imported(),
    }


def _outcome(kind: str, url: str) -> str:
    """``ok``, ``missing <extra>``, ``unsupported``, or the failure's type (an adapter there)."""
    try:
        store = open_store(kind, url)
    except MissingExtra as exc:
        return f"missing {exc.extra}"
    except UnsupportedStoreUrl:
        return "unsupported"
    except ImportError as exc:  # a bare ModuleNotFoundError: no extra named
        return f"ImportError {exc}"
    except Exception as exc:  # the adapter is there and tried its server
        return type(exc).__name__
    getattr(store, "close", lambda: None)()
    return "ok"


def refusals() -> dict[str, Any]:
    return {
        "postgresql": {kind: _outcome(kind, POSTGRES_URL) for kind in KINDS},
        "s3": {kind: _outcome(kind, "s3://bucket/prefix") for kind in KINDS},
        "extras_imported": extras_imported(),
    }


def s3() -> dict[str, Any]:
    sink = open_store("capture", "s3://bucket/prefix?region=us-east-1&compression=zstd")
    return {"sink": type(sink).__name__, "extras_imported": extras_imported()}


def main() -> None:
    what, *args = sys.argv[1:]
    if what == "demo":
        result = demo(Path(args[0]))
    elif what == "command-api":
        from runtrail.config import Settings

        state_dir = Path(args[0])
        settings = Settings(state_dir=state_dir, bootstrap_servers="127.0.0.1:1")
        result = {
            "command_api_status": command_api(settings),
            "state": sorted(p.name for p in state_dir.iterdir()),
            "extras_imported": extras_imported(),
        }
    elif what == "refusals":
        result = refusals()
    elif what == "s3":
        result = s3()
    else:
        raise SystemExit(f"unknown probe {what!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
