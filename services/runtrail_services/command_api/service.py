"""The command API's process: the Starlette app under uvicorn, plus ``/metrics`` and health.

Not a topic consumer: ``runtrail run command-api`` starts it through
:data:`runtrail.runtime.registry.RECEIVERS`. Accepted commands are in the store's outbox; the
``outbox-relay`` puts them on the events topic.

With a content store configured (``RUNTRAIL_CONTENT_STORE_URL``), the store is opened with the
publisher's protector built from the same settings (policy, content and key stores), so the
events it records hold references only; the API opens them for the token's tenant with the
readers' resolver (``docs/PRIVACY.md``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading

import uvicorn

from runtrail.events.limits import EventLimits
from runtrail.persistence import COMMAND_EVENTS, open_store
from runtrail.persistence.urls import redact_url
from runtrail.privacy.protect import ContentProtector, protector_from_settings
from runtrail.privacy.resolve import resolver_from_settings
from runtrail.runtime.receiver import ServingReceiver, tenant_auth
from runtrail_services.command_api.app import build_app
from runtrail_services.command_api.settings import CommandApiSettings


class CommandApiServer:
    """The app on ``host:port`` (0 picks a free port), served by uvicorn on a daemon thread."""

    def __init__(self, app: object, host: str, port: int) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self._socket.listen(2048)  # connections queue until uvicorn serves: none is refused
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")  # type: ignore[arg-type]
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="command-api", daemon=True)

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    def _serve(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._socket]))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._socket.close()


class CommandApiReceiver(ServingReceiver[CommandApiSettings]):
    """One command API process; :meth:`run` serves until :meth:`request_stop`."""

    name = "command-api"
    default_port = 9500
    own_settings = CommandApiSettings

    def open(self) -> None:
        auth = tenant_auth(self.name, self.own)
        self.store = open_store(
            COMMAND_EVENTS,
            self.own.resolved_store(self.settings.state_dir),
            protector=protector_from_settings(self.settings),
        )
        self.resolver = resolver_from_settings(self.settings)
        app = build_app(
            self.store,
            auth,
            max_body_bytes=self.own.max_body_bytes,
            limits=EventLimits.from_settings(self.settings),
            resolver=self.resolver,
        )
        self.server = CommandApiServer(app, self.own.http_host, self.own.http_port)

    def serving(self) -> str:
        store = redact_url(self.own.resolved_store(self.settings.state_dir))
        where = f"{self.own.http_host}:{self.port}/v1/runs"
        return f"command-api (pid {os.getpid()}) on {where} -> {store}"

    def shut_down(self) -> None:
        self.server.stop()
        self.store.close()
        if isinstance(self.store.protector, ContentProtector):
            self.store.protector.vault.close()
        self.resolver.close()
