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


def test_the_packages_names_still_resolve() -> None:
    import runtrail.audit
    import runtrail.events
    import runtrail.publisher
    from runtrail.audit.errors import AuditError
    from runtrail.events.codec import EventCodec
    from runtrail.publisher.publisher import Publisher

    assert (runtrail.audit.AuditError, runtrail.events.EventCodec) == (AuditError, EventCodec)
    assert runtrail.publisher.Publisher is Publisher
    for package in (runtrail.events, runtrail.audit, runtrail.publisher):
        for name in package.__all__:
            assert getattr(package, name) is not None, (package, name)
    with pytest.raises(AttributeError):
        _ = runtrail.events.no_such_name


@pytest.mark.parametrize(
    "importing",
    [
        "from runtrail.events import DATA_MODELS",
        "from runtrail.events.models import DATA_MODELS",
        "from runtrail.events.upcasting import DATA_MODELS",
        "from runtrail.events.avro_schemas import DATA_MODELS",
        "from runtrail.events.codec import EventCodec; from runtrail.events import DATA_MODELS",
        "from runtrail.commands.catalog import RULES; from runtrail.events import DATA_MODELS",
    ],
)
def test_every_reader_of_the_registry_sees_every_event_type(importing: str) -> None:
    """The registries fill as payload modules are imported: a fresh process that reaches them
    any of these ways sees every type."""
    from runtrail.events import DATA_MODELS

    counted = subprocess.run(
        [sys.executable, "-c", f"{importing}; print(len(DATA_MODELS))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert int(counted.stdout) == len(DATA_MODELS)


#: names of the envelope that read its registries (an Event's validation picks its class there)
_REGISTRY_READERS = {"CURRENT_VERSIONS", "DATA_MODELS", "EVENT_CLASSES", "data_model", "Event"}
#: the modules that may take them from the envelope itself: the payloads and the registered model
_REGISTERING = {"domain_events.py", "runtime_events.py", "models.py"}


def test_no_module_reads_the_registries_from_the_envelope_alone() -> None:
    """The envelope's registries are whole only once every payload module is imported, which
    ``runtrail.events.models`` (and the package's names) guarantee and the envelope does not."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    offenders = []
    for path in sorted(
        p for top in ("shared", "services", "tools") for p in (root / top).rglob("*.py")
    ):
        text = path.read_text(encoding="utf-8")
        if "runtrail.events.envelope" not in text or (
            path.parent.name == "events" and path.name in _REGISTERING
        ):
            continue
        tree = ast.parse(text)
        typing_only = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for node in ast.walk(block)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "runtrail.events.envelope"
                and id(node) not in typing_only
                and {a.name for a in node.names} & _REGISTRY_READERS
            ):
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert offenders == [], "import these from runtrail.events.models"


@pytest.mark.parametrize(
    ("args", "spared"),
    [
        (["audit", "verify", "--help"], EVENT_MODEL | PUBLISHER),
        (["audit", "export", "--help"], EVENT_MODEL | PUBLISHER),
        (["erase", "--help"], EVENT_MODEL | PUBLISHER),
        (["capture", "query", "--help"], EVENT_MODEL | PUBLISHER),
        (["command", "approve", "--help"], {"runtrail.commands.store", "runtrail.projection"}),
    ],
)
def test_a_command_s_parser_loads_only_what_its_commands_share(
    args: list[str], spared: set[str]
) -> None:
    """Building a command's parser (what every run of it does first) loads no part that only
    some of its subcommands use: the event model where events are read, the event store where
    a run is resumed."""
    imported = imported_by("runtrail_tools.cli.main", *args)
    assert f"runtrail_tools.cli.{args[0]}_cmd" in imported
    assert not imported & spared


def test_a_service_run_loads_not_the_settings_catalog() -> None:
    """``runtrail run SERVICE`` has the catalog of every service's options only for --help."""
    imported = imported_by("runtrail_tools.cli.main", "run", "no-such-service")
    assert "runtrail_tools.cli.run_cmd" in imported
    assert not {m for m in imported if m.startswith("runtrail_tools.settings_catalog")}
    assert not imported & PUBLISHER
