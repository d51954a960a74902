"""The README's code blocks, for the tests that run them exactly as written.

Why one helper: every example in the README that a test runs is marked by an HTML comment
naming the test; the block is the first fenced block after that marker.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_block(
    marker: str, language: str = "python", what: str = "example", source: Path = README
) -> str:
    """The first ``language`` block after ``marker`` in README.md, or in another document
    ``source`` (the test fails if gone)."""
    text = source.read_text()
    assert marker in text, f"{source.name} lost the {what} (marker {marker!r})"
    match = re.search(rf"```{language}\n(.*?)```", text[text.index(marker) :], re.S)
    assert match is not None, f"no {language} block after {marker!r} in {source.name}"
    return match.group(1)
