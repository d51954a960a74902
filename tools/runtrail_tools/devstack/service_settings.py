"""What the stack knows about a service's own settings, found generically from the registry.

Each service keeps a pydantic-settings class in ``runtrail_services.<package>.settings`` with
the env prefix ``RUNTRAIL_<NAME>_``. The stack passes a service's dev values as environment
variables (never as ``-o``, which ``ps`` shows: some are tokens), and only for fields the
class really has, so a service that lands later, or renames a field, still starts.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any

from pydantic_settings import BaseSettings

from runtrail.runtime.registry import RECEIVERS, SERVICES

#: Receivers (not topic consumers) the local stack runs beside the consumer services: the
#: command API and the relay that puts its store's outbox on the events topic.
STACK_RECEIVERS: tuple[str, ...] = ("outbox-relay", "command-api")

#: Settings the local stack tunes for quick feedback, where a service has them (a test checks
#: that every key is still a field of its service's settings class).
DEV_TUNING: dict[str, dict[str, str]] = {
    # a session with unsaved events holds its offsets until saved: save quiet ones sooner
    "sessions": {"idle_save_s": "2"},
    # sign a tree head over the run heads every 10 s instead of every minute
    "audit": {"tree_head_interval_s": "10"},
}


@dataclass(frozen=True)
class ServiceSettingsInfo:
    """A service's settings class (None when it has none) and its env prefix."""

    service: str
    cls: type[BaseSettings] | None

    @property
    def env_prefix(self) -> str:
        if self.cls is None:
            return ""
        return str(self.cls.model_config.get("env_prefix", ""))

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(self.cls.model_fields) if self.cls is not None else frozenset()

    def has(self, name: str) -> bool:
        return name in self.fields

    def env_name(self, field: str) -> str:
        return f"{self.env_prefix}{field}".upper()

    def env(self, values: dict[str, Any]) -> dict[str, str]:
        """``values`` as environment variables, keeping only the fields the class has."""
        return {self.env_name(k): str(v) for k, v in values.items() if self.has(k)}


def service_package(service: str) -> str:
    """``runtrail_services.<package>`` of a registered service."""
    module = {**SERVICES, **RECEIVERS}[service].partition(":")[0]
    return module.rsplit(".", 1)[0]


def is_receiver(service: str) -> bool:
    """A receiver is started by ``runtrail run`` too, but joins no consumer group."""
    return service in RECEIVERS


def importable(service: str) -> bool:
    """Whether the service's (or receiver's) class imports (a helper may still be building
    it, or its extra is not installed)."""
    from runtrail.runtime.registry import service_class

    try:
        if is_receiver(service):
            module_name, _, attr = RECEIVERS[service].partition(":")
            getattr(importlib.import_module(module_name), attr)
        else:
            service_class(service)
    except (ImportError, AttributeError):
        return False
    return True


def settings_info(service: str) -> ServiceSettingsInfo:
    """The BaseSettings subclass defined in the service's ``settings`` module, if any."""
    try:
        module = importlib.import_module(f"{service_package(service)}.settings")
    except ModuleNotFoundError:
        return ServiceSettingsInfo(service, None)
    found = [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, BaseSettings)
        and obj is not BaseSettings
        and obj.__module__ == module.__name__
    ]
    # a package may hold the settings of two processes (otlp-ingest and otlp-mapper): the one
    # that names the service is its own
    named = [cls for cls in found if getattr(cls, "service_name", None) == service]
    if len(named) == 1:
        return ServiceSettingsInfo(service, named[0])
    return ServiceSettingsInfo(service, found[0] if len(found) == 1 else None)
