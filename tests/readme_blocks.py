"""The code blocks of the README and docs/, for the tests that run them exactly as written.

Why one helper: every example in the README or a document under docs/ that a test runs is
marked by an HTML comment naming the test; the block is the first fenced block after that
marker, wherever the example moves.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
#: where tested examples live: the README, then each document under docs/
DOCUMENTS = (README, *sorted((README.parent / "docs").glob("*.md")))


def document_of(marker: str, what: str = "example") -> Path:
    """The one document (README.md or docs/*.md) that holds ``marker``."""
    holding = [doc for doc in DOCUMENTS if marker in doc.read_text()]
    assert holding, f"no document holds the {what} (marker {marker!r})"
    assert len(holding) == 1, f"{what}: marker {marker!r} in {[d.name for d in holding]}"
    return holding[0]


def readme_block(
    marker: str, language: str = "python", what: str = "example", source: Path | None = None
) -> str:
    """The first ``language`` block after ``marker`` in the document that holds it (README.md
    or one under docs/), or in ``source`` (the test fails if gone)."""
    source = source or document_of(marker, what)
    text = source.read_text()
    assert marker in text, f"{source.name} lost the {what} (marker {marker!r})"
    match = re.search(rf"```{language}\n(.*?)```", text[text.index(marker) :], re.S)
    assert match is not None, f"no {language} block after {marker!r} in {source.name}"
    return match.group(1)
