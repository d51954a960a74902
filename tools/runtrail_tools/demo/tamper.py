"""Export one run's audit chain, alter one event in a copy, and let verification find it.

The export is what the audit store holds, as an auditor would receive it
(``runtrail audit export``). The tampered copy changes who approved the action and keeps every
stored hash, as a forger without the chain would; verification must name the first link whose
hash no longer matches. The independent verifier (``tools/verify_audit_export.py``, no runtrail
code) is run on both files too when the checkout has it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtrail.files import CHECKOUT_ROOT


@dataclass(frozen=True)
class Verdict:
    valid: bool
    length: int
    first_broken_index: int | None
    reason: str | None


@dataclass(frozen=True)
class TamperReport:
    run_id: str
    tenant: str
    export: Path
    tampered: Path
    #: What was changed: ``index``, the event type and the field, old and new value.
    changed: dict[str, Any]
    original: Verdict
    after: Verdict
    #: The standalone verifier's verdicts (None when tools/ is not in this checkout).
    independent_original: Verdict | None
    independent_after: Verdict | None


def independent_verifier() -> Path | None:
    """``RUNTRAIL_DEMO_VERIFIER`` (the image sets it), else ``tools/`` of the checkout."""
    given = os.environ.get("RUNTRAIL_DEMO_VERIFIER")
    path = Path(given) if given else CHECKOUT_ROOT / "tools" / "verify_audit_export.py"
    return path if path.is_file() else None


def _independent(tool: Path | None, export: Path) -> Verdict | None:
    if tool is None:
        return None
    done = subprocess.run(
        [sys.executable, str(tool), str(export)], capture_output=True, text=True, timeout=60
    )
    try:
        verdict = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Verdict(False, 0, None, f"verifier failed (exit {done.returncode})")
    return Verdict(
        bool(verdict["valid"]),
        int(verdict["length"]),
        verdict.get("firstBrokenIndex"),
        verdict.get("reason"),
    )


def _verdict(result: Any) -> Verdict:
    return Verdict(result.valid, result.length, result.first_broken_index, result.reason)


def tamper_line(lines: list[str]) -> tuple[int, dict[str, Any]]:
    """Alter one event in place: the approver of an approval if there is one, else the data
    of the run's last event. Returns the line number and what changed."""
    parsed = [json.loads(line) for line in lines]
    target = next(
        (i for i, link in enumerate(parsed) if link["event"]["type"] == "run.approval_granted"),
        len(parsed) - 1,
    )
    link = parsed[target]
    data = link["event"]["data"]
    field = "approvedBy" if "approvedBy" in data else next(iter(data), "note")
    old = data.get(field)
    data[field] = "mallory@outside" if field == "approvedBy" else f"{old}-altered"
    lines[target] = json.dumps(link, separators=(",", ":"), ensure_ascii=False)
    return target, {
        "index": link["index"],
        "type": link["event"]["type"],
        "field": field,
        "from": old,
        "to": data[field],
    }


def export_and_tamper(store: Any, tenant: str, run_id: str, folder: Path) -> TamperReport:
    from runtrail.audit.export import verify_export, write_export

    folder.mkdir(parents=True, exist_ok=True)
    export = folder / f"{run_id}.links.jsonl"
    write_export(export, store.load_chain(tenant, run_id))
    lines = export.read_text(encoding="utf-8").splitlines()
    _, changed = tamper_line(lines)
    tampered = folder / f"{run_id}.tampered.links.jsonl"
    tampered.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tool = independent_verifier()
    return TamperReport(
        run_id=run_id,
        tenant=tenant,
        export=export,
        tampered=tampered,
        changed=changed,
        original=_verdict(verify_export(export)),
        after=_verdict(verify_export(tampered)),
        independent_original=_independent(tool, export),
        independent_after=_independent(tool, tampered),
    )
