"""The top-level listing (``runtrail``, ``--help``, a mistyped command) comes from static tables
in ``runtrail_tools.cli.main``, so a start that lists commands imports none of them: the tables
must say what the modules register, and stay cheap to import."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from runtrail_tools.cli.main import IMPORTED_EXTRAS, build_parser, listing_parser


def _choices(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {c.dest: c.help for c in action._choices_actions}


def test_the_listing_is_what_the_command_modules_register() -> None:
    full, listed = build_parser(), listing_parser()
    assert _choices(listed) == _choices(full)
    assert listed.format_help() == full.format_help()
    assert listed.format_usage() == full.format_usage()


#: builds both parsers with some extras' modules unimportable, prints whether they agree
_WITHOUT_EXTRAS = """
import json, sys
for module in json.loads(sys.argv[1]):
    sys.modules[module] = None  # an import of it fails as if it were not installed
from runtrail_tools.cli.main import build_parser, listing_parser
print(json.dumps([listing_parser().format_help(), build_parser().format_help()]))
"""


def _helps_without(modules: list[str]) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EXTRAS, json.dumps(modules)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    listed, built = json.loads(done.stdout)
    return listed, built


def test_the_listing_names_the_extra_a_command_module_cannot_import_without() -> None:
    """With no extra, or without one module an entry of ``IMPORTED_EXTRAS`` names, the listing
    marks exactly the commands an import marks: a module that gains (or loses) a module-level
    import of an extra's module must be entered in (or dropped from) the table."""
    from runtrail.extras import EXTRAS

    rounds = [
        sorted(EXTRAS),
        *([m] for m in sorted({m for ms in IMPORTED_EXTRAS.values() for m in ms})),
    ]
    for modules in rounds:
        listed, built = _helps_without(modules)
        assert "(not installed: pip install 'runtrail[services]')" in built, modules
        assert listed == built, modules


#: runs ``runtrail ARGS`` in this process and prints the modules it imported, as JSON
_IMPORTED_BY = """
import contextlib, io, json, sys
from runtrail_tools.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)))
"""


def imported_by(*args: str) -> set[str]:
    """The modules a fresh process imports to run ``runtrail ARGS``."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTED_BY, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return set(json.loads(done.stdout))


def test_listing_the_commands_imports_no_command() -> None:
    for args in (["--help"], [], ["no-such-command"]):
        imported = imported_by(*args)
        assert {m for m in imported if m.startswith("runtrail")} == {
            "runtrail",
            "runtrail.extras",
            "runtrail_tools",
            "runtrail_tools.cli",
            "runtrail_tools.cli.main",
        }, args
        assert not {m.split(".")[0] for m in imported} & {"pydantic", "confluent_kafka"}, args
