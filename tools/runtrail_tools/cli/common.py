"""Flags every command shares, and how they become :class:`runtrail.config.Settings`."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from runtrail.config import Settings, load_settings


def add_common_flags(parser: argparse.ArgumentParser, *, tenant: bool = True) -> None:
    """Connection and logging flags; each overrides its ``RUNTRAIL_*`` variable.

    ``tenant=False`` leaves ``--tenant`` out, for a command that lists it with the run it
    selects (a chain or a projection is picked by tenant *and* run, not a connection detail).
    """
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--bootstrap-servers", help="Kafka bootstrap servers (RUNTRAIL_BOOTSTRAP_SERVERS)"
    )
    if tenant:
        group.add_argument("--tenant", help="tenant ID (RUNTRAIL_TENANT)")
    group.add_argument("--events-topic", help="events topic (RUNTRAIL_EVENTS_TOPIC)")
    group.add_argument("--state-dir", help="local state folder (RUNTRAIL_STATE_DIR)")
    group.add_argument(
        "-X",
        dest="kafka_option",
        action="append",
        metavar="KEY=VALUE",
        default=[],
        help="extra librdkafka option for every client, e.g. -X security.protocol=SASL_SSL",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")


def positive_int(text: str) -> int:
    """An argparse type for a count such as ``--limit``: a whole number, at least 1 (0 or a
    negative number would otherwise mean nothing, everything, or a database error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def settings_from_args(args: argparse.Namespace, **extra: Any) -> Settings:
    """Settings from the environment, overridden by whatever flags were given."""
    overrides: dict[str, Any] = {
        "bootstrap_servers": getattr(args, "bootstrap_servers", None),
        "tenant": getattr(args, "tenant", None),
        "events_topic": getattr(args, "events_topic", None),
        "state_dir": getattr(args, "state_dir", None),
        **extra,
    }
    settings = load_settings(**overrides)
    pairs = getattr(args, "kafka_option", None) or []
    if pairs:
        options = dict(settings.kafka_options)
        for pair in pairs:
            if "=" not in pair:
                raise SystemExit(f"-X expects KEY=VALUE, got {pair!r}")
            key, value = pair.split("=", 1)
            options[key.strip()] = value
        settings = settings.model_copy(update={"kafka_options": options})
    return settings


def configure_logging(verbosity: int) -> None:
    level = logging.WARNING - 10 * min(verbosity + 1, 2)
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def replay_group(subparsers: Any) -> Any:
    """The subcommands of ``runtrail replay`` (an ``argparse`` subparsers action), creating the
    ``replay`` group if no module did yet. Other modules may call this to add theirs."""
    parser = subparsers.choices.get("replay")
    if parser is None:
        parser = subparsers.add_parser(
            "replay",
            help="replay what was recorded: one node (mock or live) or a whole projection",
            description="Replay recorded events. `replay projection` and `replay node --mock` "
            "never call a model or tool; `replay node --live` is an explicit re-invocation.",
        )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return parser.add_subparsers(dest="replay_command", metavar="COMMAND", required=True)
