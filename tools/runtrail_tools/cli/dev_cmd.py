"""``runtrail dev up|down|status``: the whole local stack, each service its own process.

``up`` starts the local broker (as ``runtrail kafka up`` would, in ``<state dir>/kafka``),
creates the topics, then runs every registered service (``runtrail run NAME``) on the fixed
port table, with embedded stores under the state folder, pid files and one log per service in
``<state dir>/dev/``. ``status`` reads each process's ``/metrics``. ``down`` stops them all.
``status`` and ``down`` take every flag of ``up`` (a script passes the same to all three) but
find the stack, its ports and its broker's, from what ``up`` recorded in the state folder.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from runtrail_tools.cli.common import add_common_flags, settings_from_args
from runtrail_tools.devstack.ports import DEFAULT_BASE, DEFAULT_PROMETHEUS_PORT

#: Exit status of ``dev status`` when no stack is recorded.
NOT_RUNNING = 3


def stack_from_args(args: argparse.Namespace) -> Any:
    from runtrail_tools.devstack.stack import DevStack, StackOptions

    settings = settings_from_args(
        args,
        kafka_port=getattr(args, "kafka_port", None),
        kafka_controller_port=getattr(args, "kafka_controller_port", None),
    )
    options = StackOptions(
        port_base=getattr(args, "port_base", DEFAULT_BASE),
        services=getattr(args, "service", None) or None,
        manage_broker=not getattr(args, "no_broker", False),
        prometheus=getattr(args, "prometheus", False),
        prometheus_port=getattr(args, "prometheus_port", DEFAULT_PROMETHEUS_PORT),
        ui=not getattr(args, "no_ui", False),
        scrape_interval=getattr(args, "scrape_interval", "5s"),
        ready_timeout=getattr(args, "timeout", 120.0),
        stop_timeout=getattr(args, "stop_timeout", 20.0),
        brokers=getattr(args, "brokers", None),
    )
    return DevStack(settings, options)


def _up(args: argparse.Namespace) -> int:
    from runtrail_tools.devstack.stack import StackError
    from runtrail_tools.devstack.status import format_table, rows

    stack = stack_from_args(args)
    print(f"runtrail dev up (state {stack.state_dir})")
    try:
        state = stack.up()
    except StackError as exc:
        print(f"runtrail: {exc}", file=sys.stderr)
        print("runtrail: what did start is recorded; `runtrail dev down` stops it", file=sys.stderr)
        return 1
    print()
    print(format_table(rows(stack, state)))
    print(f"\n  export RUNTRAIL_BOOTSTRAP_SERVERS={state.bootstrap_servers}")
    if state.ui_url:
        print(f"  run explorer: {state.ui_url} (sign in with a token of {state.tokens_file})")
    commands = state.services.get("command-api")
    if commands is not None and commands.api_url is not None:
        print(
            f"  command API: export RUNTRAIL_COMMAND_URL={commands.api_url} "
            f"RUNTRAIL_COMMAND_TOKEN=<a token of {state.tokens_file}>"
        )
    print(f"  logs: {stack.dev_dir / 'logs'}   stop: runtrail dev down")
    return 0


def _down(args: argparse.Namespace) -> int:
    stack = stack_from_args(args)
    print(f"runtrail dev down (state {stack.state_dir})")
    problems = stack.down(keep_broker=args.keep_broker)
    for problem in problems:
        print(f"runtrail: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _status(args: argparse.Namespace) -> int:
    from runtrail_tools.devstack.status import format_table, rows

    stack = stack_from_args(args)
    state = stack.load_state()
    if state is None:
        print(f"no dev stack recorded in {stack.state_dir} (runtrail dev up)")
        return NOT_RUNNING
    table = rows(stack, state)
    print(format_table(table))
    return 0 if all(r.state in ("ready", "up", "external") for r in table) else 1


def add_stack_flags(parser: argparse.ArgumentParser, *, recorded: bool = False) -> None:
    """The flags of ``dev up`` (also used by ``runtrail demo --up``).

    ``recorded``: for ``dev down`` and ``dev status``, which take them too, so that a script
    passes one set of flags to all three, but act on what ``up`` recorded in the state folder.
    """
    group: Any = parser
    if recorded:
        group = parser.add_argument_group(
            "the flags of dev up",
            "accepted so that up, status and down take the same flags; the stack is the one "
            "dev up recorded in the state folder (its ports, services and broker)",
        )
    group.add_argument(
        "--port-base",
        type=int,
        default=DEFAULT_BASE,
        help=f"first port of the services' port table (default {DEFAULT_BASE}: noop +0, "
        "capture +10, resume-cache +20/21, sessions +30/31, audit +40, projector +50, ui +80, "
        "demo +90)",
    )
    group.add_argument(
        "--service",
        action="append",
        metavar="NAME",
        help="run only this service (repeat; default: every registered service)",
    )
    group.add_argument(
        "--no-broker",
        action="store_true",
        help="use RUNTRAIL_BOOTSTRAP_SERVERS instead of starting the local broker",
    )
    group.add_argument("--kafka-port", type=int, help="local broker port (RUNTRAIL_KAFKA_PORT)")
    group.add_argument(
        "--kafka-controller-port",
        type=int,
        help="local broker controller port (RUNTRAIL_KAFKA_CONTROLLER_PORT)",
    )
    group.add_argument(
        "--brokers",
        type=int,
        metavar="N",
        help="run a local Kafka cluster of N nodes (runtrail kafka up --brokers N)",
    )
    group.add_argument(
        "--prometheus", action="store_true", help="also run Prometheus (Debian's binary)"
    )
    group.add_argument("--prometheus-port", type=int, default=DEFAULT_PROMETHEUS_PORT)
    group.add_argument(
        "--no-ui", action="store_true", help="do not start the run explorer (runtrail ui)"
    )
    group.add_argument("--scrape-interval", default="5s", help="Prometheus scrape interval")
    group.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for every service's /readyz"
    )


def register(subparsers: Any) -> None:
    dev = subparsers.add_parser(
        "dev",
        help="run the local stack: broker, topics and every service",
        description="Start, inspect and stop the local stack (broker and every service).",
    )
    sub = dev.add_subparsers(dest="dev_command", metavar="ACTION", required=True)

    up = sub.add_parser("up", help="start the broker, topics and every service")
    add_stack_flags(up)
    add_common_flags(up)
    up.set_defaults(func=_up)

    down = sub.add_parser("down", help="stop every service, then the broker")
    down.add_argument(
        "--stop-timeout", type=float, default=20.0, help="seconds after SIGTERM before SIGKILL"
    )
    down.add_argument("--keep-broker", action="store_true", help="leave the broker running")
    add_stack_flags(down, recorded=True)
    add_common_flags(down)
    down.set_defaults(func=_down)

    status = sub.add_parser(
        "status",
        help="service, pid, consumer group, lag, processed, metrics URL "
        f"(exit 0 if all ready, 1 if not, {NOT_RUNNING} if no stack)",
    )
    add_stack_flags(status, recorded=True)
    add_common_flags(status)
    status.set_defaults(func=_status)
