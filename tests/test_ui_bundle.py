"""The proof panel shows the transparency log's witnessed checkpoint and offers the run's
offline proof bundle, in headless Chromium: the checkpoint cosigned by a real, independent
witness (transparency-dev's omniwitness), its signature and the cosignature checked with the
keys the audit service's settings name; the bundle the page downloads is byte for byte what
``runtrail audit bundle --run`` writes, and the standalone verifier accepts it. A witness the
explorer does not trust makes the checkpoint "NOT witnessed"; a run logged after the
checkpoint is said not to be in it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runtrail.audit import NoteSigner
from runtrail.audit.cosignature import WitnessVerifier
from runtrail.audit.tile_store import FileTileStore
from runtrail.persistence import AUDIT_LINKS, open_store
from runtrail.persistence.urls import sqlite_url
from runtrail_services.audit.settings import AuditSettings
from runtrail_services.audit.signing import load_or_create_signer
from runtrail_services.audit.transparency import LogPublisher
from runtrail_services.audit.witnessing import Witness, WitnessClient
from tests.test_ui_proof import steps_run
from tests.ui_stores import seed, serving
from tests.ui_support import shoot, sign_in, ui_env, wait
from tests.witness_support import omniwitness

TENANT = "acme"
TOKENS = {TENANT: "acme-token"}
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Served:
    url: str
    state: Path
    #: the audit settings the explorer and the CLI read (the witness and its quorum)
    env: dict[str, str]
    witness: WitnessVerifier
    log_vkey: str
    logged: str
    later: str
    last_leaf: int


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("ui-bundle")
    state = root / "state"
    state.mkdir()
    logged, later = steps_run("bundle-logged", 3), steps_run("bundle-later", 2)
    seed(state, [logged])
    audit = AuditSettings()
    signer = load_or_create_signer(audit.resolved_key_path(state), audit.key_name)
    with omniwitness(root, audit.log_origin, signer.verifier.vkey()) as witness:
        store = open_store(AUDIT_LINKS, sqlite_url(state / "audit.db"))
        try:
            client = WitnessClient([Witness(witness.url, witness.verifier)])
            log = LogPublisher(
                store, signer, audit.log_origin, FileTileStore(root / "tlog"), client, quorum=1
            )
            stored = log.publish()
            assert stored is not None and log.witnessed(stored)
            last_leaf = store.log_index(TENANT, logged.run_id, len(logged.events) - 1)
            assert last_leaf is not None
        finally:
            store.close()
    seed(state, [later])  # logged after the checkpoint
    env = {
        "RUNTRAIL_AUDIT_WITNESSES": json.dumps({witness.url: witness.verifier.vkey()}),
        "RUNTRAIL_AUDIT_WITNESS_QUORUM": "1",
    }
    with serving(state, TOKENS, root / "ui.log", **env) as url:
        yield Served(
            url,
            state,
            env,
            witness.verifier,
            signer.verifier.vkey(),
            logged.run_id,
            later.run_id,
            last_leaf,
        )


def open_proof(driver: Any, url: str, run_id: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/runs/{run_id}")
    wait(driver, lambda d: d.find_elements(By.ID, "log-checkpoint"))


def test_the_proof_panel_shows_the_witnessed_checkpoint(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, served.url, TOKENS[TENANT])
    open_proof(browser, served.url, served.logged)
    assert browser.find_element(By.ID, "log-signature").text == "valid"
    witnessed = browser.find_element(By.ID, "log-witnessed").text
    assert witnessed.startswith(
        "witnessed: 1 of 1 trusted witnesses cosigned (quorum 1): witness.test/w1 at "
    )
    assert browser.find_element(By.ID, "log-run").text == (
        f"all 10 links, the last one at leaf {served.last_leaf}"
    )
    assert browser.find_element(By.ID, "log-size").text.startswith(f"{served.last_leaf + 1} leaves")
    browser.find_element(By.ID, "proof").location_once_scrolled_into_view  # noqa: B018
    shoot(browser, tmp_path, "witnessed-checkpoint")
    # a run logged after the checkpoint is not claimed to be in it
    open_proof(browser, served.url, served.later)
    assert browser.find_element(By.ID, "log-run").text.startswith("not all of its links")


def test_the_bundle_downloaded_is_the_clis_and_verifies_offline(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    sign_in(browser, served.url, TOKENS[TENANT])
    open_proof(browser, served.url, served.logged)
    href = browser.find_element(By.ID, "download-bundle").get_attribute("href")
    downloaded = browser.execute_async_script(
        "var done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {credentials: 'same-origin'}).then(function (r) {"
        "  return r.text().then(function (t) { done([r.status, t]); }); });",
        href,
    )
    assert downloaded[0] == 200
    env = {**ui_env(served.state), **served.env}
    cli_file = tmp_path / "cli.bundle.json"
    done = subprocess.run(
        [sys.executable, "-m", "runtrail_tools.cli.main", "audit", "bundle",
         "--run", served.logged, "--tenant", TENANT, "--state-dir", str(served.state),
         "-o", str(cli_file)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert downloaded[1].encode("utf-8") == cli_file.read_bytes()
    page_file = tmp_path / "page.bundle.json"
    page_file.write_text(downloaded[1], "utf-8")
    bundle = json.loads(downloaded[1])
    assert bundle["keys"] == {
        "log": served.log_vkey,
        "witnesses": [served.witness.vkey()],
        "quorum": 1,
    }
    checked = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "verify_audit_log.py"), "bundle", str(page_file),
         "--vkey", served.log_vkey, "--witness", served.witness.vkey(), "--quorum", "1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads(checked.stdout)["valid"] is True


def test_a_witness_the_explorer_does_not_trust_leaves_it_not_witnessed(
    served: Served, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    stranger = WitnessVerifier.of_signer(
        NoteSigner("witness.test/w1", Ed25519PrivateKey.generate())
    )  # the same name, another key: its cosignature would not verify
    env = {
        "RUNTRAIL_AUDIT_WITNESSES": json.dumps({"http://127.0.0.1:9": stranger.vkey()}),
        "RUNTRAIL_AUDIT_WITNESS_QUORUM": "1",
    }
    with serving(served.state, TOKENS, tmp_path / "ui.log", **env) as url:
        sign_in(browser, url, TOKENS[TENANT])
        open_proof(browser, url, served.logged)
        assert browser.find_element(By.ID, "log-witnessed").text == (
            "NOT witnessed: 0 of 1 trusted witnesses cosigned (quorum 1)"
        )
