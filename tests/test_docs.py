"""The settings reference (docs/CONFIGURATION.md) is generated from the code, so it cannot drift."""

from __future__ import annotations

from pathlib import Path

from runtrail_tools.settings_catalog import render_markdown, sections

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "CONFIGURATION.md"
BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"


def test_the_settings_table_is_current() -> None:
    text = REFERENCE.read_text()
    assert BEGIN in text and END in text, "docs/CONFIGURATION.md lacks the settings markers"
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    assert block == render_markdown(), (
        "docs/CONFIGURATION.md settings are stale: regenerate with `runtrail settings --markdown`"
    )


def test_every_registered_service_with_settings_is_documented() -> None:
    documented = {section.name for section in sections()}
    assert "core" in documented
    for name in ("capture", "resume-cache", "sessions", "projector", "ui"):
        assert name in documented
