"""``runtrail demo``: scripted agents through the running stack, read back from the services.

Without ``--up`` it uses the stack ``runtrail dev up`` recorded in the state folder (or, in
docker-compose and on clusters, the services named by ``RUNTRAIL_DEMO_SERVICES``). With
``--up`` it starts the local stack first, and afterwards keeps it running until Ctrl-C (then
stops it), stops it at once with ``--stop``, or leaves it running with ``--detach``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from runtrail_tools.cli.common import add_common_flags, settings_from_args
from runtrail_tools.cli.dev_cmd import add_stack_flags, stack_from_args

EXIT_OK, EXIT_FINDINGS, EXIT_NO_STACK = 0, 1, 3


def _targets(args: argparse.Namespace) -> Any:
    """The stack ``dev up`` recorded (its running services), else the environment's."""
    from runtrail_tools.demo.targets import DemoSettings, from_env, from_stack

    settings = settings_from_args(args)
    demo = DemoSettings()
    if args.metrics_port is not None:
        demo = demo.model_copy(update={"metrics_port": args.metrics_port})
    stack = stack_from_args(args)
    state = stack.load_state()
    if state is not None:
        alive = stack.running(state)
        dead = [name for name, up in alive.items() if not up]
        if dead:
            print(f"runtrail demo: not running, left out: {', '.join(dead)}", file=sys.stderr)
        state.services = {k: v for k, v in state.services.items() if alive[k]}
        if not state.services:
            print("runtrail demo: the recorded stack runs no service", file=sys.stderr)
            return None
        return from_stack(state, settings, demo)
    if demo.services:
        return from_env(settings, demo)
    return None


def _print_explorer(args: argparse.Namespace) -> None:
    """Where to look at these runs: the stack's run explorer, if it started one."""
    state = stack_from_args(args).load_state()
    if state is not None and state.ui_url:
        print("\n== run explorer ==")
        print(f"  open          {state.ui_url}")
        print(f"  sign in with  a tenant's token from {state.tokens_file}")


def _wait_for_interrupt() -> None:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()


def _langgraph_installed() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) for m in ("langgraph", "langchain_core"))


def run_demo(args: argparse.Namespace) -> int:
    from runtrail_tools.demo.report import format_report
    from runtrail_tools.demo.runner import Demo, DemoError
    from runtrail_tools.devstack.stack import StackError

    stack = stack_from_args(args) if args.up else None
    if stack is not None:
        print(f"runtrail dev up (state {stack.state_dir})")
        try:
            stack.up()
        except StackError as exc:
            print(f"runtrail: {exc}", file=sys.stderr)
            return EXIT_FINDINGS
    targets = _targets(args)
    if targets is None:
        print(
            "runtrail demo: no stack found: run `runtrail dev up` first, use `runtrail demo "
            "--up`, or name the services in RUNTRAIL_DEMO_SERVICES",
            file=sys.stderr,
        )
        return EXIT_NO_STACK
    if args.framework == "langgraph" and not _langgraph_installed():
        print(
            "runtrail demo: --framework langgraph needs LangGraph: pip install 'runtrail[langchain]'",
            file=sys.stderr,
        )
        return EXIT_FINDINGS
    try:
        report = Demo(targets, args.workdir, framework=args.framework).run()
    except DemoError as exc:
        print(f"runtrail demo: {exc}", file=sys.stderr)
        return EXIT_FINDINGS
    print(format_report(report))
    _print_explorer(args)
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    problems = report.problems()
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    status = EXIT_FINDINGS if problems else EXIT_OK
    if stack is not None:
        if args.stop:
            stack.down()
        elif args.detach:
            print("\nthe stack keeps running: `runtrail dev status`, `runtrail dev down`")
        else:
            print("\nthe stack keeps running; Ctrl-C stops it (`runtrail dev status` meanwhile)")
            _wait_for_interrupt()
            print("\nstopping the stack")
            stack.down()
    return status


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="drive scripted agents through the stack and show what the services recorded",
        description="Drive scripted agents (two tenants, several concurrent runs, a crash and "
        "its resume) through the stack, then print per run what each service recorded.",
    )
    parser.add_argument("--up", action="store_true", help="start the local stack first")
    after = parser.add_mutually_exclusive_group()
    after.add_argument("--stop", action="store_true", help="with --up: stop the stack after")
    after.add_argument(
        "--detach", action="store_true", help="with --up: leave the stack running and return"
    )
    parser.add_argument(
        "--framework",
        choices=("scripted", "langgraph"),
        default="scripted",
        help="the agent: scripted (default) or a real LangGraph agent through the LangChain "
        "adapter (needs the 'langchain' extra)",
    )
    parser.add_argument("--json", type=Path, help="also write the summary as JSON here")
    parser.add_argument(
        "--workdir", type=Path, help="where the demo keeps its files (default <state dir>/demo)"
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="serve the agent's publisher metrics here (default: the stack's agent port)",
    )
    add_stack_flags(parser)
    add_common_flags(parser)
    parser.set_defaults(func=run_demo)
