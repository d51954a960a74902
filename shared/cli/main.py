"""Entry point of the ``runtrail`` console script.

Each command group lives in its own module exposing ``register(subparsers)``; a command sets
``func`` on its parser, which receives the parsed args and returns the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from runtrail import __version__

#: Modules contributing commands, in the order they appear in ``--help``.
COMMAND_MODULES: tuple[str, ...] = (
    "runtrail.cli.kafka_cmd",
    "runtrail.cli.publish_cmd",
    "runtrail.cli.run_cmd",
    "runtrail.cli.audit_cmd",
    "runtrail.cli.capture_cmd",
    "runtrail.cli.cache_cmd",
    "runtrail.cli.projection_cmd",
    "runtrail.cli.replay_projection_cmd",
    "runtrail.cli.sessions_cmd",
    "runtrail.cli.dev_cmd",
    "runtrail.cli.demo_cmd",
    "runtrail.cli.settings_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="runtrail",
        description="The flight recorder for AI-agent runs, on Kafka.",
    )
    parser.add_argument("--version", action="version", version=f"runtrail {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a command group not built yet
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    from runtrail.cli.common import configure_logging

    configure_logging(getattr(args, "verbose", 0))
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
