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

from pydantic import ValidationError
from pydantic_settings import BaseSettings

from runtrail.config import Settings
from runtrail.publisher.redaction import is_sensitive_key, redact_text
from runtrail.runtime.registry import RAW_SERVICES, RECEIVERS, SERVICES

#: A setting whose name holds one of these is shown as ``***`` whole (tokens, their files,
#: signing key paths); every other value is shown with secret-shaped parts masked.
_SECRET_WORDS = ("token", "secret", "password", "key_path")
#: librdkafka options that carry key material or credentials without a secret word in their
#: name; options that have one (``sasl.password``, ``ssl.key.password``,
#: ``sasl.oauthbearer.client.secret``…) are found by :func:`is_sensitive_key`.
SECRET_OPTIONS: frozenset[str] = frozenset(
    {
        "ssl.key.pem",
        "ssl_key",
        "sasl.oauthbearer.config",
        "sasl.oauthbearer.assertion.private.key.pem",
    }
)
MASK = "***"


@dataclass(frozen=True)
class SettingsSection:
    """One settings class and what it configures."""

    name: str
    cls: type[BaseSettings]

    @property
    def prefix(self) -> str:
        return str(self.cls.model_config.get("env_prefix", ""))


def sections() -> Iterator[SettingsSection]:
    """The core settings, then each registered service's, in registry order, then the run
    explorer's (``runtrail ui``)."""
    yield SettingsSection("core", Settings)
    for service, target in {**SERVICES, **RAW_SERVICES, **RECEIVERS}.items():
        package = target.split(":", 1)[0].rsplit(".", 1)[0]
        try:
            module = importlib.import_module(f"{package}.settings")
        except ModuleNotFoundError:
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            # a package may hold two services' settings (otlp-ingest and its mapper)
            named = getattr(cls, "service_name", service) in (service, "service")
            if issubclass(cls, BaseSettings) and cls.__module__ == module.__name__ and named:
                yield SettingsSection(service, cls)
    from runtrail_tools.ui.settings import (
        UiSettings,  # a command, not a service: not in the registry
    )

    yield SettingsSection("ui", UiSettings)


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


def _secret_option(name: str) -> bool:
    return name.lower() in SECRET_OPTIONS or is_sensitive_key(name)


def masked(name: str, value: Any) -> str:
    """``value`` of setting ``name`` as ``runtrail settings`` shows it: secrets masked.

    Whole values of secret settings and of secret options inside a mapping (Kafka options,
    token tables) become ``***``; any other text has its secret-shaped parts masked by the
    publisher's redactor (a password in a store URL, a token in an option value). A mapping
    of options to files (``kafka_option_files``) shows its paths: the secrets are in the files.
    """
    if not value:
        return str(value)
    if any(w in name for w in _SECRET_WORDS):
        return MASK
    if name.endswith("_files") and isinstance(value, dict):
        # option -> the file holding it: the paths are shown (they are where to look)
        return str({str(k): redact_text(str(v)) for k, v in value.items()})
    if isinstance(value, dict):
        shown = {
            str(k): MASK if _secret_option(str(k)) else redact_text(str(v))
            for k, v in value.items()
        }
        return str(shown)
    if isinstance(value, list | tuple):
        return str([redact_text(str(v)) for v in value])
    return redact_text(str(value))


def _invalid(exc: Exception) -> str:
    """Why a section does not load, without the offending input (it may be a secret)."""
    if isinstance(exc, ValidationError):
        parts = [
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
            for err in exc.errors(include_input=False, include_url=False)
        ]
        return "<invalid: " + "; ".join(parts) + ">"
    return f"<invalid: {redact_text(str(exc))}>"


def effective_values() -> Iterator[tuple[str, str, str]]:
    """(section, variable, value in force) with secrets masked."""
    for section in sections():
        try:
            instance = section.cls()
        except Exception as exc:  # a misconfigured section is reported, not fatal
            yield section.name, f"{section.prefix}*", _invalid(exc)
            continue
        for name in section.cls.model_fields:
            value = getattr(instance, name)
            yield section.name, f"{section.prefix}{name.upper()}", masked(name, value)
