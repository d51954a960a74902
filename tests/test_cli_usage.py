"""CLI papercuts (issue 12): one name for the broker port everywhere, and an error in a
subcommand prints that subcommand's usage, not the top-level one."""

from __future__ import annotations

import pytest

from runtrail_tools.cli.main import build_parser, main


def test_kafka_up_takes_kafka_port_like_dev_up_and_keeps_port_as_a_hidden_alias(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    new = parser.parse_args(
        ["kafka", "up", "--kafka-port", "19092", "--kafka-controller-port", "19093"]
    )
    old = parser.parse_args(["kafka", "up", "--port", "19092", "--controller-port", "19093"])
    assert (new.port, new.controller_port) == (old.port, old.controller_port) == (19092, 19093)
    dev = parser.parse_args(["dev", "up", "--kafka-port", "19092"])
    assert dev.kafka_port == 19092
    with pytest.raises(SystemExit):
        main(["kafka", "up", "--help"])
    text = capsys.readouterr().out
    assert "--kafka-port" in text and "--kafka-controller-port" in text
    assert "--port " not in text and "--controller-port" not in text.replace(
        "--kafka-controller-port", ""
    )


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["kafka", "up", "--bogus", "1"], "usage: runtrail kafka up "),
        (["cache", "stats", "--nope"], "usage: runtrail cache stats "),
        (["cache", "nope"], "usage: runtrail cache "),
        (["audit", "verify", "--not-an-option"], "usage: runtrail audit verify "),
    ],
)
def test_an_error_in_a_subcommand_prints_that_subcommands_usage(
    argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert "usage: runtrail [-h]" not in err


def test_the_top_level_still_reports_an_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["no-such-command"])
    assert capsys.readouterr().err.startswith("usage: runtrail [-h]")


def test_a_command_registers_only_its_own_modules_and_the_table_says_which() -> None:
    """`runtrail X` builds X's parser alone (each command group's imports cost every start):
    the table of which module makes which command must be exact, or a command would lose its
    subcommands (``replay`` is capture's and the projection's)."""
    import argparse
    import importlib

    from runtrail_tools.cli.main import COMMAND_MODULES, CommandParser, modules_of

    def choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return dict(action.choices)

    for module, commands in COMMAND_MODULES.items():
        parser = CommandParser(prog="runtrail")
        importlib.import_module(module).register(parser.add_subparsers(dest="command"))
        assert tuple(choices(parser)) == commands, module
    whole = choices(build_parser())
    assert set(whole) == {c for commands in COMMAND_MODULES.values() for c in commands}
    for command, full in whole.items():
        alone = choices(build_parser(command))[command]
        assert alone.format_help() == full.format_help(), command
        assert len(modules_of(command)) < len(COMMAND_MODULES)
    assert modules_of(None) == modules_of("no-such-command") == list(COMMAND_MODULES)
