"""`runtrail run SERVICE --help` (issue 13: "try `runtrail run otlp-ingest --help` as a user
would"): besides the flags every service shares, it lists the options of the service named,
from its settings class, so the receiver's port and tokens are found without the README."""

from __future__ import annotations

import pytest

from runtrail_services.otlp_ingest.settings import OtlpIngestSettings
from runtrail_tools.cli.main import main


def help_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_run_otlp_ingest_help_lists_the_receivers_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = help_of(["run", "otlp-ingest", "--help"], capsys)
    assert text.startswith("usage: runtrail run ")
    assert "receiver" in text and "--bootstrap-servers" in text
    options = text[text.index("options of otlp-ingest") :]
    for name in OtlpIngestSettings.model_fields:
        assert f"  {name}  (RUNTRAIL_OTLP_INGEST_{name.upper()}, default " in options, name
    assert "default 4318" in options and "Bearer token per tenant" in options


def test_run_help_without_options_or_with_an_unknown_service_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    noop = help_of(["run", "noop", "--help"], capsys)
    assert "  output  (RUNTRAIL_NOOP_OUTPUT, default None)" in noop  # -o output=PATH, not "none"
    assert help_of(["run", "nope", "-h"], capsys).endswith("no service named 'nope'\n")
    plain = help_of(["run", "--help"], capsys)
    assert "`runtrail run SERVICE --help` also" in plain and "options of" not in plain
