"""Optional dependencies: which extra of the distribution brings each, and one clear error.

``pip install runtrail`` is what an agent needs to publish (the publisher, the events, the
framework adapters). The stores, the services, the CLI's service commands and the dev stack
need extras (see README "Install"); a feature whose extra is missing raises
:class:`MissingExtra`, naming the extra to install, instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: top-level module -> the extra of ``runtrail`` to install for it. A module several extras
#: bring names the one that covers every feature using it: ``services`` holds all of
#: ``commands`` (starlette, uvicorn, prometheus_client), so it is the answer for the run
#: explorer and the command API alike.
EXTRAS: dict[str, str] = {
    "prometheus_client": "services",
    "cryptography": "services",
    "starlette": "services",
    "uvicorn": "services",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "obstore": "s3",
    "zstandard": "s3",
    "langchain_core": "langchain",
    "langgraph": "langgraph",
    "opentelemetry": "otel",
    # protobuf (``google.protobuf``): opentelemetry-proto brings it, for the otlp-ingest receiver
    "google": "otel",
    "agents": "openai-agents",
    "litellm": "litellm",
}


#: the name a user knows a module's distribution by, where the import name says little
DISTRIBUTIONS = {"google": "protobuf"}


class MissingExtra(ImportError):
    """A feature needs a module that only an extra of ``runtrail`` installs."""

    def __init__(self, module: str, extra: str, feature: str | None = None) -> None:
        self.extra = extra
        shown = DISTRIBUTIONS.get(module, module)
        what = f"{feature} needs {shown}" if feature else f"{shown} is not installed"
        super().__init__(f"{what}: pip install 'runtrail[{extra}]'", name=module)


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` (a key of :data:`EXTRAS` or below one) for ``feature``."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = explain(exc, feature)
        if missing is None:
            raise
        raise missing from exc


def explain(exc: ModuleNotFoundError, feature: str | None = None) -> MissingExtra | None:
    """The :class:`MissingExtra` behind ``exc``, or None when no extra provides that module."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    return None if extra is None else MissingExtra(top, extra, feature)
