"""JSONL export: round trip, the tamper table on a file, and the standalone verifier script."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtrail.audit import (
    HashChainedEventLog,
    MalformedLink,
    read_export,
    verify_export,
    write_export,
)
from tests.examples import examples

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "verify_audit_export.py"


def event(seq: int, run: str = "run-1", text: str | None = None) -> dict[str, Any]:
    return {
        "eventId": f"e-{run}-{seq}",
        "runId": run,
        "tenantId": "acme",
        "sequence": str(seq),
        "type": "MODEL_RESPONSE",
        "schemaVersion": 1,
        "occurredAt": "2024-05-01T12:00:00Z",
        "actor": {"kind": "agent", "id": "a"},
        "correlationId": "c",
        "data": {"message": text or f"part {seq} — ünïcödé", "raw": {"n": seq, "f": 0.25}},
    }


def chain(n: int = 6, run: str = "run-1") -> HashChainedEventLog:
    log = HashChainedEventLog()
    for seq in range(1, n + 1):
        log.append(event(seq, run))
    return log


@pytest.fixture
def export(tmp_path: Path) -> Path:
    path = tmp_path / "links.jsonl"
    assert write_export(path, chain().links) == 6
    return path


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def rewrite(path: Path, objs: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs), "utf-8")


def run_tool(path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-I", str(TOOL), str(path), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


def both(path: Path) -> dict[str, Any]:
    """The library's verdict, after checking the standalone script agrees with it."""
    ours = verify_export(path).to_json()
    code, theirs = run_tool(path)
    assert theirs == ours
    assert code == (0 if ours["valid"] else 1)
    return ours


# --- format and round trip -------------------------------------------------------------------
def test_round_trip(export: Path) -> None:
    assert tuple(read_export(export)) == chain().links


def test_each_line_is_canonical_json_with_the_link_and_its_run(export: Path) -> None:
    raw = export.read_bytes().split(b"\n")
    assert raw[-1] == b""
    first = json.loads(raw[0])
    assert set(first) == {"tenantId", "runId", "index", "prevHash", "hash", "event"}
    assert (first["tenantId"], first["runId"], first["index"]) == ("acme", "run-1", 0)
    assert raw[0].startswith(b'{"event":{"actor":')  # sorted keys, no whitespace
    assert "ü".encode() in raw[0]  # UTF-8, not \u escapes


def test_good_export_verifies_in_the_library_and_the_script(export: Path) -> None:
    assert both(export) == {"valid": True, "length": 6, "firstBrokenIndex": None, "reason": None}


def test_reformatted_lines_still_verify(export: Path) -> None:
    # Whitespace, key order and \u escapes are not evidence: the canonical form is.
    text = "".join(
        json.dumps(obj, indent=None, ensure_ascii=True, sort_keys=False, separators=(", ", ": "))
        + "\n"
        for obj in [dict(reversed(list(o.items()))) for o in lines(export)]
    )
    export.write_text(text, "ascii")
    assert both(export)["valid"]


def test_an_empty_export_is_an_empty_chain_but_the_script_does_not_call_it_valid(
    tmp_path: Path,
) -> None:
    path = tmp_path / "empty.jsonl"
    write_export(path, [])
    # The library sees an empty chain (what a trusted head then checks against) ...
    assert verify_export(path).to_json() == {
        "valid": True,
        "length": 0,
        "firstBrokenIndex": None,
        "reason": None,
    }
    # ... but a verdict on nothing is never "valid" (12.3); `audit verify --file` says the same.
    assert run_tool(path) == (
        1,
        {"valid": False, "length": 0, "firstBrokenIndex": None, "reason": "no links"},
    )


# --- the tamper table, against a file --------------------------------------------------------
def test_modified_payload(export: Path) -> None:
    objs = lines(export)
    objs[3]["event"]["data"]["message"] = "edited"
    rewrite(export, objs)
    assert both(export) == {
        "valid": False,
        "length": 6,
        "firstBrokenIndex": 3,
        "reason": "hash mismatch",
    }


def test_deleted_middle_link(export: Path) -> None:
    objs = lines(export)
    del objs[2]
    rewrite(export, objs)
    assert both(export) == {  # the position of the survivor after the gap, not its label 3
        "valid": False,
        "length": 5,
        "firstBrokenIndex": 2,
        "reason": "prevHash mismatch",
    }


def test_swapped_pair(export: Path) -> None:
    objs = lines(export)
    objs[1], objs[2] = objs[2], objs[1]
    rewrite(export, objs)
    verdict = both(export)
    assert (verdict["valid"], verdict["firstBrokenIndex"], verdict["reason"]) == (
        False,
        1,  # the first position out of place, whatever label it carries (2)
        "prevHash mismatch",
    )


def test_swapped_pair_with_indices_relabelled(export: Path) -> None:
    objs = lines(export)
    objs[1], objs[2] = objs[2], objs[1]
    objs[1]["index"], objs[2]["index"] = 1, 2
    rewrite(export, objs)
    verdict = both(export)
    assert (verdict["firstBrokenIndex"], verdict["reason"]) == (1, "prevHash mismatch")


def test_modified_stored_hash(export: Path) -> None:
    objs = lines(export)
    objs[4]["hash"] = objs[4]["hash"][:-1] + ("0" if objs[4]["hash"][-1] != "0" else "1")
    rewrite(export, objs)
    verdict = both(export)
    assert (verdict["firstBrokenIndex"], verdict["reason"]) == (4, "hash mismatch")


def test_uppercase_hash_is_not_the_same_hash(export: Path) -> None:
    objs = lines(export)
    objs[0]["hash"] = objs[0]["hash"].upper()
    rewrite(export, objs)
    assert both(export)["reason"] == "hash mismatch"


def test_relabelled_run_on_a_line(export: Path) -> None:
    objs = lines(export)
    objs[2]["runId"] = "run-other"
    rewrite(export, objs)
    verdict = both(export)
    assert (verdict["firstBrokenIndex"], verdict["reason"]) == (2, "run mismatch")


def test_a_link_of_another_run_spliced_in(tmp_path: Path) -> None:
    other = chain(3, run="run-2").links
    mine = chain(3).links
    path = tmp_path / "spliced.jsonl"
    write_export(path, [*mine, other[0]])
    verdict = both(path)
    # position 3, though the spliced line is labelled 0 (the position is what verification reports)
    assert (verdict["firstBrokenIndex"], verdict["reason"]) == (3, "prevHash mismatch")


def test_unreadable_line(export: Path) -> None:
    text = export.read_text("utf-8").splitlines(keepends=True)
    text[2] = '{"not": json\n'
    export.write_text("".join(text), "utf-8")
    assert both(export) == {
        "valid": False,
        "length": 6,
        "firstBrokenIndex": 2,
        "reason": "malformed link",
    }
    with pytest.raises(MalformedLink, match="line 3"):
        read_export(export)


def test_duplicate_keys_are_malformed(export: Path) -> None:
    text = export.read_text("utf-8").splitlines(keepends=True)
    text[1] = text[1].replace('{"event":', '{"index":1,"event":', 1)
    export.write_text("".join(text), "utf-8")
    assert both(export)["reason"] == "malformed link"


def test_missing_key_is_malformed(export: Path) -> None:
    objs = lines(export)
    del objs[0]["prevHash"]
    rewrite(export, objs)
    assert both(export)["reason"] == "malformed link"


# --- what only a trusted head shows -----------------------------------------------------------
def test_truncated_tail_and_resealed_rewrite_pass_alone_but_not_against_a_head(
    tmp_path: Path,
) -> None:
    full = chain()
    head = full.head()
    assert head is not None
    trusted = ["--expect-length", str(head.length), "--expect-hash", head.hash]

    cut = tmp_path / "cut.jsonl"
    write_export(cut, full.links[:4])
    assert both(cut)["valid"]  # a shorter chain is a perfectly good chain on its own
    assert run_tool(cut, *trusted) == (
        1,
        {"valid": False, "length": 4, "firstBrokenIndex": 4, "reason": "truncated"},
    )

    rewritten = HashChainedEventLog()
    rewritten.restore(
        [event(seq, text="rewritten") if seq == 3 else event(seq) for seq in range(1, 7)]
    )
    resealed = tmp_path / "resealed.jsonl"
    write_export(resealed, rewritten.links)
    assert both(resealed)["valid"]
    assert run_tool(resealed, *trusted) == (
        1,
        {"valid": False, "length": 6, "firstBrokenIndex": 5, "reason": "rewritten"},
    )

    good = tmp_path / "good.jsonl"
    write_export(good, [*full.links])
    assert run_tool(good, *trusted)[0] == 0


def test_script_exit_code_two_when_the_file_is_missing(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-I", str(TOOL), str(tmp_path / "absent.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2


def test_script_imports_only_the_standard_library_and_rfc8785() -> None:
    tree = ast.parse(TOOL.read_text("utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported - set(sys.stdlib_module_names) == {"rfc8785"}


@settings(max_examples=examples(300), deadline=None)
@given(
    run=st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12),
    tenant=st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12),
    index=st.integers(min_value=0, max_value=2**53 - 1),
)
def test_the_topic_line_of_a_link_is_the_rfc8785_export_line(
    run: str, tenant: str, index: int
) -> None:
    """What the audit topic carries for a link is RFC 8785 of its export object, for any run
    and tenant text (control characters, U+2028, astral) and index; an index past what JSON
    numbers hold exactly is refused, as RFC 8785 refuses it."""
    import rfc8785

    from runtrail.audit.link import Link, seal
    from runtrail.events import EventError
    from runtrail_services.audit.messages import link_line

    form = {**event(1, run="r"), "runId": run, "tenantId": tenant}
    sealed = seal(0, "0" * 64, form, (tenant, run, form["eventId"]))
    link = Link(index, sealed.event, sealed.prev_hash, sealed.hash, sealed.sealed_bytes, sealed.ids)
    assert link_line(link) == rfc8785.dumps(link.to_json())
    too_far = Link(2**53, link.event, link.prev_hash, link.hash, link.sealed_bytes, link.ids)
    with pytest.raises(EventError):
        link_line(too_far)


@settings(max_examples=examples(300), deadline=None)
@given(
    runs=st.lists(
        st.tuples(  # IDs a link can hold: not blank
            st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=8).filter(
                lambda text: not text.isspace()
            ),
            st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=8).filter(
                lambda text: not text.isspace()
            ),
        ),
        min_size=1,
        max_size=3,
    ),
    hashes=st.lists(
        st.one_of(
            st.from_regex(r"[0-9a-f]{64}", fullmatch=True),
            st.text(st.characters(exclude_categories=("Cs",)), max_size=6),
        ),
        min_size=2,
        max_size=6,
    ),
    index=st.integers(min_value=0, max_value=2**53 - 2),
)
def test_the_batch_of_topic_lines_is_each_links_rfc8785_export_line(
    runs: list[tuple[str, str]], hashes: list[str], index: int
) -> None:
    """``link_messages`` (a flush's whole batch, each run's key and tail made once) writes
    what ``link_line`` writes for each link alone, which is RFC 8785 of the export object,
    also for hashes that need escaping (a link read back from an edited store)."""
    import rfc8785

    from runtrail.audit.link import Link, seal
    from runtrail_services.audit.messages import link_line, link_messages

    links = []
    for position, prev in enumerate(hashes):
        run, tenant = runs[position % len(runs)]
        form = {**event(position + 1, run="r"), "runId": run, "tenantId": tenant}
        sealed = seal(0, "0" * 64, form, (tenant, run, form["eventId"]))
        links.append(Link(index + position % 2, sealed.event, prev, hashes[-position - 1]))
        links.append(sealed)
    made = list(link_messages(links))
    assert [key for key, _ in made] == [link.run_id.encode() for link in links]
    for (_, value), link in zip(made, links, strict=True):
        assert value == link_line(link) == rfc8785.dumps(link.to_json())
