"""Every settings class of the project, for documentation and ``runtrail settings``.

The core :class:`runtrail.config.Settings` is shared by every command; each service adds its
own class (``services/<name>/settings.py``, env prefix ``RUNTRAIL_<NAME>_``) so it can grow
options without touching the shared one. This module finds them through the service registry,
so a new service is documented as soon as it is registered.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic_settings import BaseSettings

from runtrail.config import Settings
from runtrail.runtime.registry import SERVICES

_SECRET_WORDS = ("token", "secret", "password", "key_path")


@dataclass(frozen=True)
class SettingsSection:
    """One settings class and what it configures."""

    name: str
    cls: type[BaseSettings]

    @property
    def prefix(self) -> str:
        return str(self.cls.model_config.get("env_prefix", ""))


def sections() -> Iterator[SettingsSection]:
    """The core settings, then each registered service's, in registry order."""
    yield SettingsSection("core", Settings)
    for service, target in SERVICES.items():
        package = target.split(":", 1)[0].rsplit(".", 1)[0]
        try:
            module = importlib.import_module(f"{package}.settings")
        except ModuleNotFoundError:
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseSettings) and cls.__module__ == module.__name__:
                yield SettingsSection(service, cls)


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        return "{}" if value == {} else "[]" if value == [] else str(value)
    return str(field.default)


def render_markdown() -> str:
    """One table per section: variable, default, meaning."""
    out: list[str] = []
    for section in sections():
        out.append(f"**{section.name}** (`{section.prefix}*`)\n")
        out.append("| variable | default | meaning |")
        out.append("| --- | --- | --- |")
        for name, field in section.cls.model_fields.items():
            default = _default(field)
            if name == "kafka_cache_dir":
                default = "~/.cache/runtrail/kafka"
            description = (field.description or "").replace("|", "\\|").replace("\n", " ")
            out.append(f"| `{section.prefix}{name.upper()}` | `{default}` | {description} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def effective_values() -> Iterator[tuple[str, str, str]]:
    """(section, variable, value in force) with secrets masked."""
    for section in sections():
        try:
            instance = section.cls()
        except Exception as exc:  # a misconfigured section is reported, not fatal
            yield section.name, f"{section.prefix}*", f"<invalid: {exc}>"
            continue
        for name in section.cls.model_fields:
            value = getattr(instance, name)
            shown = "***" if value and any(w in name for w in _SECRET_WORDS) else str(value)
            yield section.name, f"{section.prefix}{name.upper()}", shown
