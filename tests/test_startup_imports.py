"""Every runtrail process pays for its imports before it does any work, and the suite starts
hundreds of them: a part that is only read (the errors, the JSON form, the redaction rules, a
command's parser) must not load the heavy parts beside it. Checked on the modules a fresh
process holds, so a later module-level import is caught without timing anything."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: the pydantic event models and the codec (with fastavro)
EVENT_MODEL = {"runtrail.events.envelope", "runtrail.events.codec", "fastavro"}
#: the publisher's machinery (its producer, spool and drain)
PUBLISHER = {"runtrail.publisher.publisher", "runtrail.publisher.wal"}

_IMPORTED_BY = """
import contextlib, importlib, io, json, sys
module, args = sys.argv[1], sys.argv[2:]
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        main = importlib.import_module(module)
        if args:
            main.main(args)
    except SystemExit:
        pass
print(json.dumps(sorted(sys.modules)))
"""


def imported_by(module: str, *args: str) -> set[str]:
    """The modules a fresh process holds after importing ``module`` (and, given ``args``,
    running its ``main(args)``)."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTED_BY, module, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return set(json.loads(done.stdout))


@pytest.mark.parametrize(
    ("module", "spared"),
    [
        ("runtrail.events.errors", EVENT_MODEL | {"pydantic"}),
        ("runtrail.events.jsonform", EVENT_MODEL | {"pydantic"}),
        ("runtrail.audit.errors", EVENT_MODEL | {"pydantic", "cryptography"}),
        ("runtrail.audit.canonical", EVENT_MODEL | {"pydantic", "cryptography"}),
        ("runtrail.publisher.redaction", PUBLISHER | EVENT_MODEL | {"confluent_kafka"}),
    ],
)
def test_a_part_of_a_package_loads_not_the_rest(module: str, spared: set[str]) -> None:
    assert not imported_by(module) & spared


def test_the_packages_names_still_resolve_and_the_model_registers_every_event() -> None:
    """A name of a lazy package is its submodule's; loading any payload module registers the
    payloads of both modules, whichever is imported first."""
    import runtrail.audit
    import runtrail.events
    import runtrail.publisher
    from runtrail.audit.errors import AuditError
    from runtrail.events.codec import EventCodec
    from runtrail.publisher.publisher import Publisher

    assert (runtrail.audit.AuditError, runtrail.events.EventCodec) == (AuditError, EventCodec)
    assert runtrail.publisher.Publisher is Publisher
    for name in runtrail.events.__all__ + runtrail.audit.__all__ + runtrail.publisher.__all__:
        assert any(hasattr(p, name) for p in (runtrail.events, runtrail.audit, runtrail.publisher))
    with pytest.raises(AttributeError):
        _ = runtrail.events.no_such_name
    counts = """
import sys
from runtrail.events.{0} import EventData
from runtrail.events.envelope import DATA_MODELS
print(len(DATA_MODELS))
"""
    registered = {
        first: subprocess.run(
            [sys.executable, "-c", counts.format(first)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout.strip()
        for first in ("domain_events", "runtime_events", "envelope")
    }
    assert set(registered.values()) == {str(len(runtrail.events.DATA_MODELS))}, registered


@pytest.mark.parametrize(
    "args",
    [
        ["audit", "verify", "--help"],
        ["audit", "export", "--help"],
        ["erase", "--help"],
        ["capture", "query", "--help"],
    ],
)
def test_a_command_s_parser_loads_not_the_event_model(args: list[str]) -> None:
    """Building a command's parser (what every run of it does first) needs no event model:
    commands that read events load it when they run."""
    imported = imported_by("runtrail_tools.cli.main", *args)
    assert f"runtrail_tools.cli.{args[0]}_cmd" in imported
    assert not imported & (EVENT_MODEL | PUBLISHER)


def test_a_service_run_loads_not_the_settings_catalog() -> None:
    """``runtrail run SERVICE`` has the catalog of every service's options only for --help."""
    imported = imported_by("runtrail_tools.cli.main", "run", "no-such-service")
    assert "runtrail_tools.cli.run_cmd" in imported
    assert not {m for m in imported if m.startswith("runtrail_tools.settings_catalog")}
    assert not imported & PUBLISHER
