"""Entry point of the ``runtrail`` console script.

Each command group lives in its own module exposing ``register(subparsers)``; a command sets
``func`` on its parser, which receives the parsed args and returns the exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from runtrail import __version__
from runtrail.extras import EXTRAS, MissingExtra, explain

#: Modules contributing commands, in the order they appear in ``--help``, and the top-level
#: commands each registers (``replay`` is made of two: capture's and the projection's).
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "runtrail_tools.cli.kafka_cmd": ("kafka",),
    "runtrail_tools.cli.topics_cmd": ("topics",),
    "runtrail_tools.cli.publish_cmd": ("publish",),
    "runtrail_tools.cli.run_cmd": ("run",),
    "runtrail_tools.cli.audit_cmd": ("audit",),
    "runtrail_tools.cli.capture_cmd": ("capture", "replay"),
    "runtrail_tools.cli.cache_cmd": ("cache",),
    "runtrail_tools.cli.offsets_cmd": ("offsets",),
    "runtrail_tools.cli.projection_cmd": ("projection",),
    "runtrail_tools.cli.replay_projection_cmd": ("replay",),
    "runtrail_tools.cli.sessions_cmd": ("sessions",),
    "runtrail_tools.cli.erase_cmd": ("erase",),
    "runtrail_tools.cli.prune_cmd": ("prune",),
    "runtrail_tools.cli.keys_cmd": ("keys",),
    "runtrail_tools.cli.dev_cmd": ("dev",),
    "runtrail_tools.cli.demo_cmd": ("demo",),
    "runtrail_tools.cli.settings_cmd": ("settings",),
    "runtrail_tools.cli.ui_cmd": ("ui",),
    "runtrail_tools.cli.command_cmd": ("command", "resume"),
    "runtrail_tools.cli.otlp_cmd": ("otlp",),
}


#: The one-line help of each top-level command, in ``--help`` order: the listing (``runtrail``,
#: ``--help``, a mistyped command) is made from this table without importing any command's
#: module (all of them cost a start as much as the work of most commands).
#: tests/test_cli_listing.py holds it equal to what the modules register.
COMMAND_HELP: dict[str, str] = {
    "kafka": "run a local Kafka broker, or a cluster of several (KRaft)",
    "topics": "the design's Kafka topics",
    "publish": "publish JSON-form events from a JSONL file",
    "run": "run a consumer service or a receiver",
    "audit": "verify, export and prove the audit chains",
    "capture": "query captured node records",
    "replay": "replay what was recorded: one node (mock or live) or a whole projection",
    "cache": "inspect the resume cache",
    "offsets": "show or move where a service reads (its group and its store)",
    "projection": "read (or rebuild) the run projection",
    "sessions": "list, show, delete or rebuild stored session snapshots",
    "erase": "erase a run's or a data subject's protected content",
    "prune": "apply retention: delete what is older, or beyond the latest N checkpoints",
    "keys": "manage the key store of protected content",
    "dev": "run the local stack: broker, topics and every service",
    "demo": "drive scripted agents through the stack and show what the services recorded",
    "settings": "show every setting in force, or (--markdown) the reference table",
    "ui": "serve the run explorer (web UI) on 127.0.0.1",
    "command": "send a command to a run (command API)",
    "resume": "resume a run (seed 002 resume protocol)",
    "otlp": "what the OTLP ingest did not record",
}

#: Command modules whose import needs modules of an extra (keys of
#: :data:`runtrail.extras.EXTRAS`): the listing names the extra of the first one missing, as an
#: import of the module would. tests/test_cli_listing.py holds it equal to what they import.
IMPORTED_EXTRAS: dict[str, tuple[str, ...]] = {
    "runtrail_tools.cli.kafka_cmd": ("cryptography",),
    "runtrail_tools.cli.run_cmd": ("prometheus_client",),
    "runtrail_tools.cli.audit_cmd": ("cryptography",),
    "runtrail_tools.cli.offsets_cmd": ("prometheus_client",),
    "runtrail_tools.cli.settings_cmd": ("prometheus_client",),
}


def modules_of(command: str | None) -> list[str]:
    """The modules to register for a run of ``command``: only those that make it (every
    module's imports cost a command's start; a command group's imports can be heavy), or all
    for a command that does not exist (the full parser; :func:`listing_parser` lists them
    without importing any)."""
    chosen = [m for m, commands in COMMAND_MODULES.items() if command in commands]
    return chosen or list(COMMAND_MODULES)


def _command_of(module: str) -> str:
    """The command a module stands for when it cannot be imported: ``erase_cmd`` -> ``erase``."""
    return module.rsplit(".", 1)[-1].removesuffix("_cmd").replace("_", "-")


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose leaf commands reject unknown arguments themselves.

    Plain argparse hands a subcommand's unrecognized arguments up to the top-level parser,
    which then prints ``usage: runtrail [-h] [--version] COMMAND ...`` — useless to someone
    who mistyped an option of ``runtrail kafka up``. Subparsers inherit this class (argparse
    makes them of the parent's type), so every error prints the usage of the command it is in.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and self._is_leaf():
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def _is_leaf(self) -> bool:
        return self.prog != ROOT_PROG and not any(
            isinstance(a, argparse._SubParsersAction) for a in self._actions
        )


ROOT_PROG = "runtrail"


def _root_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The top-level parser and its (still empty) subparsers action."""
    parser = CommandParser(
        prog=ROOT_PROG,
        description="The flight recorder for AI-agent runs, on Kafka.",
    )
    parser.add_argument("--version", action="version", version=f"runtrail {__version__}")
    return parser, parser.add_subparsers(dest="command", metavar="COMMAND")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``command`` alone (see :func:`modules_of`)."""
    parser, subparsers = _root_parser()
    for name in modules_of(command):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a command group not built yet
                continue
            missing = explain(exc, f"runtrail {_command_of(name)}")
            if missing is None:
                raise
            register_missing(subparsers, _command_of(name), missing)
            continue
        module.register(subparsers)
    return parser


def listing_parser() -> argparse.ArgumentParser:
    """The top-level parser with every command listed (from :data:`COMMAND_HELP`) and none
    built: what ``runtrail``, ``runtrail --help`` and a mistyped command need, at the cost of
    no command module's imports. Its help and errors are those of :func:`build_parser`."""
    parser, subparsers = _root_parser()
    for module, commands in COMMAND_MODULES.items():
        absent = [m for m in IMPORTED_EXTRAS.get(module, ()) if not _installed(m)]
        if absent:
            command = _command_of(module)
            register_missing(
                subparsers,
                command,
                MissingExtra(absent[0], EXTRAS[absent[0]], f"runtrail {command}"),
            )
            continue
        for command in commands:
            if command not in subparsers.choices:
                subparsers.add_parser(command, help=COMMAND_HELP[command])
    return parser


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it."""
    return importlib.util.find_spec(module) is not None


def register_missing(subparsers: Any, command: str, missing: MissingExtra) -> None:
    """A command whose extra is not installed: listed, and run it says what to install."""
    parser = subparsers.add_parser(
        command,
        help=f"(not installed: pip install 'runtrail[{missing.extra}]')",
        description=str(missing),
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(func=lambda _args: _report(missing))


def _report(missing: ImportError) -> int:
    sys.stderr.write(f"runtrail: {missing}\n")
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    if list(sys.argv[1:] if argv is None else argv)[:1] == ["run"]:
        # a long-running service: a stop asked for while it imports must still end in a clean
        # stop, not Python's default death by SIGTERM (runtrail.runtime.stop_signals)
        from runtrail.runtime import stop_signals

        stop_signals.hold()
        # a crash in a compiled part (librdkafka, the extension) leaves every thread's Python
        # stack in the service's log, not only a status of -11
        with contextlib.suppress(OSError, ValueError, AttributeError):
            faulthandler.enable()  # not when stderr is no file (a caller that captures it)
    given = list(sys.argv[1:] if argv is None else argv)
    command = given[0] if given else None
    parser = build_parser(command) if command in COMMAND_HELP else listing_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    from runtrail_tools.cli.common import configure_logging

    configure_logging(getattr(args, "verbose", 0))
    from runtrail.config import KafkaOptionFileError
    from runtrail.kafka.auth import KafkaAuthError
    from runtrail_tools.cli.store_open import StoreUnreachable

    try:
        status = int(func(args) or 0)
        if status != 0 and command == "run" and argv is None:  # the process is the service
            _exit_now(status)
        return status
    except (StoreUnreachable, KafkaAuthError, KafkaOptionFileError) as exc:
        sys.stderr.write(f"runtrail: {exc}\n")
        return 2
    except MissingExtra as exc:
        return _report(exc)
    except ModuleNotFoundError as exc:
        missing = explain(exc, f"runtrail {args.command}")
        if missing is None:
            raise
        return _report(missing)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`runtrail projection list | head`): not an error of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool a closed pipe stopped


def _exit_now(status: int) -> None:
    """End a service's process that stopped on a fatal error with its status, skipping the
    interpreter's teardown: a Kafka client whose close was given up on (the broker refused it,
    a record still unacknowledged) would be destroyed during that teardown, after OpenSSL's
    own, which can crash the process (SIGSEGV) and lose the status a supervisor acts on."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    sys.exit(main())
