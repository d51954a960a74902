"""Every relative link in the README and docs/ leads somewhere: the file exists, and a
``#fragment`` into a Markdown file names one of its headings (GitHub's anchors)."""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

#: ``[text](target)`` and ``![alt](target)``, the target up to a space or the closing paren
INLINE = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: ``[label]: target`` reference definitions
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:…


def prose(text: str) -> str:
    """The text without fenced blocks and code spans, where brackets are code, not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    body = prose(text)
    return [*INLINE.findall(body), *REFERENCE.findall(body)]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every heading anchor of a Markdown file (a repeated one gets -1, -2…, as on GitHub)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found |= set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", path.read_text(encoding="utf-8")))
    return frozenset(found)


def broken(document: Path) -> list[str]:
    problems = []
    for target in links(document.read_text(encoding="utf-8")):
        if EXTERNAL.match(target):
            continue
        path_part, _, fragment = target.partition("#")
        resolved = (document.parent / path_part).resolve() if path_part else document
        if not resolved.exists():
            problems.append(f"{target}: no {os.path.relpath(resolved, document.parent)}")
            continue
        if fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            problems.append(f"{target}: {resolved.name} has no heading #{fragment}")
    return problems


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(document: Path) -> None:
    assert broken(document) == []


def test_the_checker_sees_links_files_and_anchors(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## The `kafka up` command, again!\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#the-kafka-up-command-again) [self](#page) [web](https://example.org/page)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) `[code](not-a-link.md)`\n\n"
        "```\n[fenced](nor-this.md)\n```\n\n[ref]: ./also-missing.md\n"
    )
    assert broken(page) == [
        "missing.md: no missing.md",
        "other.md#nope: other.md has no heading #nope",
        "./also-missing.md: no also-missing.md",
    ]


def test_every_doc_the_deploy_files_name_exists() -> None:
    """The deploy files point operators at docs by path, in comments (no link to check)."""
    named = {
        (path, doc)
        for path in [REPO / "docker-compose.yml", *sorted((REPO / "deploy").rglob("*.y*ml"))]
        for doc in re.findall(r"\bdocs/[\w.-]+\.md\b", path.read_text(encoding="utf-8"))
    }
    assert any(doc == "docs/CONFIGURATION.md" for _, doc in named)  # the ConfigMap's
    missing = [
        f"{path.relative_to(REPO)}: {doc}" for path, doc in named if not (REPO / doc).exists()
    ]
    assert missing == []
