"""``runtrail run SERVICE``: run one consumer service in this process.

Start it again in another process (same group) to scale: the partitions split between them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
from typing import Any

from runtrail.extras import explain
from runtrail.runtime.registry import (
    RAW_SERVICES,
    RECEIVERS,
    SERVICES,
    UnknownService,
    service_class,
)
from runtrail.runtime.runner import ServiceRunner
from runtrail_tools.cli.common import add_common_flags, settings_from_args
from runtrail_tools.cli.service_help import ServiceHelp

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a consumer service or a receiver",
        description=(
            "Run a consumer service (one member of its consumer group) or a receiver"
            " (otlp-ingest: OTLP/HTTP spans in, events out). `runtrail run SERVICE --help`"
            " also lists that service's options."
        ),
        add_help=False,
    )
    parser.add_argument("-h", "--help", action=ServiceHelp)
    parser.add_argument(
        "service",
        help=f"service name: {', '.join(sorted({**SERVICES, **RAW_SERVICES, **RECEIVERS}))}",
    )
    parser.add_argument("--group", help="consumer group (default runtrail.SERVICE)")
    parser.add_argument("--metrics-port", type=int, help="port of /metrics, /healthz, /readyz")
    parser.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="service option (e.g. -o output=/tmp/noop.txt)",
    )
    add_common_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, group=args.group)
    options = dict(o.split("=", 1) for o in args.option if "=" in o)
    if args.service in RECEIVERS:
        return run_receiver(args.service, settings, options, args.metrics_port)
    try:
        cls = service_class(args.service)
    except UnknownService as exc:
        log.error("%s", exc)
        return 2
    try:
        runner = ServiceRunner(
            cls,
            settings,
            service_name=args.service,
            options=options,
            metrics_port=args.metrics_port,
            default_port=cls.default_port,
        )
    except (ValueError, OSError) as exc:  # a bad option, an output folder that is missing
        log.error("%s: cannot start: %s", args.service, exc)
        return 2
    runner.install_signal_handlers()
    return runner.run()


def run_receiver(
    name: str, settings: Any, options: dict[str, str], metrics_port: int | None
) -> int:
    """A receiver (``otlp-ingest``): an HTTP server feeding the publisher, not a consumer."""
    module_name, _, attr = RECEIVERS[name].partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except ModuleNotFoundError as exc:
        missing = explain(exc, f"runtrail run {name}")
        if missing is None:
            raise
        raise missing from exc  # main() prints it: the extra to install, exit 2
    try:
        receiver = cls(settings, options=options, metrics_port=metrics_port)
    except ValueError as exc:
        log.error("%s: %s", name, exc)
        return 2
    except OSError as exc:  # a port in use, an address not on this host
        log.error("%s: cannot listen: %s", name, exc)
        return 2
    receiver.install_signal_handlers()
    return int(receiver.run())
