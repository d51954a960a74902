"""Where the broker's pom and config templates live, and how templates are filled in.

They sit in ``deploy/kafka/`` of the source checkout (not in the wheel), so they are found
relative to the ``runtrail`` package, or through ``RUNTRAIL_DEPLOY_DIR``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from xml.etree import ElementTree

from runtrail.files import CHECKOUT_ROOT
from runtrail.kafka.errors import BrokerError

DEPLOY_DIR_ENV = "RUNTRAIL_DEPLOY_DIR"
_TOKEN = re.compile(r"@([A-Z][A-Z0-9_]*)@")
_POM_NS = "{http://maven.apache.org/POM/4.0.0}"


def kafka_deploy_dir() -> Path:
    """The folder holding ``pom.xml`` and the broker config templates.

    ``RUNTRAIL_DEPLOY_DIR`` may name either the ``deploy`` folder or ``deploy/kafka`` itself.
    """
    override = os.environ.get(DEPLOY_DIR_ENV)
    if override:
        base = Path(override).expanduser()
        candidates = [base, base / "kafka"]
        origin = f"{DEPLOY_DIR_ENV}={override}"
    else:
        base = CHECKOUT_ROOT / "deploy"
        candidates = [base / "kafka"]
        origin = f"the source checkout ({base})"
    for candidate in candidates:
        if (candidate / "pom.xml").is_file():
            return candidate.resolve()
    raise BrokerError(
        f"cannot find deploy/kafka/pom.xml from {origin}; run from a source checkout of "
        f"runtrail or set {DEPLOY_DIR_ENV} to its deploy/ folder"
    )


def kafka_pom() -> Path:
    """The pom whose runtime dependencies make up the broker's classpath."""
    return kafka_deploy_dir() / "pom.xml"


def kafka_version(pom: Path) -> str:
    """The ``kafka.version`` property of the pom (names the jar cache folder)."""
    try:
        root = ElementTree.parse(pom).getroot()
    except (OSError, ElementTree.ParseError) as exc:
        raise BrokerError(f"cannot read {pom}: {exc}") from exc
    node = root.find(f"{_POM_NS}properties/{_POM_NS}kafka.version")
    if node is None or not (node.text or "").strip():
        raise BrokerError(f"{pom} has no <kafka.version> property")
    return (node.text or "").strip()


def render_template(text: str, values: Mapping[str, str]) -> str:
    """Replace each ``@NAME@`` token; a token without a value is an error, not left behind."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise BrokerError(f"template token @{name}@ has no value")
        return values[name]

    return _TOKEN.sub(substitute, text)


def render_file(template: Path, target: Path, values: Mapping[str, str]) -> Path:
    """Render ``template`` into ``target`` (written atomically) and return ``target``."""
    try:
        text = template.read_text(encoding="utf-8")
    except OSError as exc:
        raise BrokerError(f"cannot read template {template}: {exc}") from exc
    rendered = render_template(text, values)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(rendered, encoding="utf-8")
    tmp.replace(target)
    return target
