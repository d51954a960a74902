"""``runtrail run SERVICE --help``: the command's usage, then the options of that service.

A user who types ``runtrail run otlp-ingest --help`` wants to know what the receiver takes
(its port, its tokens), not only the flags every service shares; the options live in the
service's settings class, so they are listed from the same catalog as the README's table.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from typing import Any


def service_options_text(service: str) -> str | None:
    """The options of ``service`` as help text, or None if it has no settings class."""
    # imported here: the catalog loads every service's settings, which a run never needs
    from runtrail_tools.settings_catalog import _default, sections

    found = [s for s in sections() if s.name == service]
    if not found:
        return None
    lines = [f"options of {service} (-o KEY=VALUE, or the environment variable):"]
    for section in found:
        for name, field in section.cls.model_fields.items():
            lines.append(f"  {name}  ({section.prefix}{name.upper()}, default {_default(field)})")
            if field.description:
                lines.extend(textwrap.wrap(field.description, 76, initial_indent=" " * 6,
                                           subsequent_indent=" " * 6))  # fmt: skip
    return "\n".join(lines)


class ServiceHelp(argparse.Action):
    """``-h``/``--help`` that adds the named service's options after the usual help."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show this help (and SERVICE's options) and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        parser.print_help()
        service = getattr(namespace, "service", None)
        text = service_options_text(service) if isinstance(service, str) else None
        if text is not None:
            print()
            print(text)
        elif service is not None:
            print(f"\nno service named {service!r}")
        parser.exit()
