"""How the CLI ends when the world, not the code, stops it: a reader that closes the pipe
(`runtrail projection list | head`) and a service option naming a folder that does not exist.
Both used to end in a Python traceback; now each gives one line and a documented status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runtrail.persistence import PROJECTIONS, open_store
from runtrail.projection import ProjectionBatch
from tests.test_projection_store import state_of

RUNTRAIL = [sys.executable, "-m", "runtrail_tools.cli.main"]


def test_a_closed_pipe_ends_the_listing_quietly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'projection.db'}"
    store = open_store(PROJECTIONS, url)
    # far more than a pipe buffer (64 KiB) of rows, so the CLI is still writing when head exits:
    # one replayed run under 3000 IDs (replaying each would cost more than the rest of the test)
    run = state_of("run-00000")
    rows = [
        run.model_copy(
            update={"run_id": rid, "last_event_id": run.last_event_id.replace(run.run_id, rid)}
        )
        for rid in (f"run-{i:05d}" for i in range(3000))
    ]
    store.apply_batch(ProjectionBatch(projections=rows))
    store.close()
    listing = subprocess.Popen(
        [*RUNTRAIL, "projection", "list", "--store", url, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert listing.stdout is not None
    first = listing.stdout.readline()
    listing.stdout.close()  # what `head -1` does once it has its line
    _, err = listing.communicate(timeout=60)
    assert b"run-" in first
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
    assert listing.returncode == 141  # 128 + SIGPIPE, as a shell reports it


def test_a_missing_output_folder_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder" / "noop.txt"
    done = subprocess.run(
        [*RUNTRAIL, "run", "noop", "-o", f"output={missing}", "--metrics-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "noop: cannot start" in done.stderr and str(missing) in done.stderr
