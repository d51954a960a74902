"""The README's "Install" table names the extras ``pyproject.toml`` has, and every one a user
installs: a renamed or new extra cannot leave the table behind.

What each row claims is run by ``tests/test_extras_install.py`` (from a clean clone, through the
index); here only the names are held to the project.
"""

from __future__ import annotations

import re
import tomllib

from runtrail.extras import EXTRAS
from tests.readme_blocks import README
from tests.venv_support import ROOT

#: extras that are no feature of runtrail: the development tools, the benchmarks' peers
NOT_USER_FACING = {"dev", "bench"}
#: ``runtrail[a,b]`` or ``.[a]`` in an install cell
INSTALL = re.compile(r"(?:runtrail|\.)\[([^\]]+)\]")


def install_rows() -> list[tuple[str, str]]:
    """(what for, how to install) of each row of the table under "## Install"."""
    text = README.read_text()
    assert "\n## Install\n" in text, "the README lost its Install section"
    section = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows[:2] == ["| to | install |", "| --- | --- |"], "the Install table changed shape"
    cells = [row.strip("|").split(" | ") for row in rows[2:]]
    assert all(len(c) == 2 for c in cells), "an Install row is not (to, install)"
    return [(to.strip(), install.strip()) for to, install in cells]


def extras_named(install: str) -> set[str]:
    return {e.strip() for found in INSTALL.findall(install) for e in found.split(",")}


def project_extras() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(pyproject["project"]["optional-dependencies"])


def test_every_extra_the_install_table_names_exists() -> None:
    named = {e for _, install in install_rows() for e in extras_named(install)}
    assert named, "no extra found in the Install table"
    assert named <= project_extras(), f"not extras of pyproject.toml: {named - project_extras()}"


def test_every_user_facing_extra_has_a_row_of_its_own() -> None:
    """Each extra a user installs is the whole install of one row (before any "(with …)"), so
    the table says what that extra alone gives."""
    alone = [extras_named(install.split(" (", 1)[0]) for _, install in install_rows()]
    rows_of = {next(iter(named)) for named in alone if len(named) == 1}
    user_facing = project_extras() - NOT_USER_FACING
    assert user_facing <= rows_of, f"extras without a row: {sorted(user_facing - rows_of)}"
    assert set(EXTRAS.values()) <= user_facing  # the extras a missing module names are here


def test_the_services_row_is_the_demo_and_the_receivers_need_services() -> None:
    """What the demo installs (the services extra alone) is the row of the demo; the receivers
    that are services (otlp-ingest) are listed with services."""
    rows = install_rows()
    demo = [install for to, install in rows if "demo" in to]
    assert [extras_named(i) for i in demo] == [{"services"}]
    otlp = [install for to, install in rows if "otlp-ingest" in to]
    assert [extras_named(i) for i in otlp] == [{"services", "otel"}]
