"""``runtrail settings``: every setting in force (secrets masked), or the reference table."""

from __future__ import annotations

import argparse
from typing import Any

from runtrail_tools.settings_catalog import effective_values, render_markdown


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "settings",
        help="show every setting in force, or (--markdown) the reference table",
        description="Every RUNTRAIL_* setting of the core and of each service, as resolved from "
        "the environment; --markdown prints the documented defaults instead.",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="the reference table (docs/CONFIGURATION.md)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.markdown:
        print(render_markdown(), end="")
        return 0
    width = max(len(variable) for _, variable, _ in effective_values())
    for _section, variable, value in effective_values():
        print(f"{variable:<{width}}  {value}")
    return 0
