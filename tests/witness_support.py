"""A real, independent witness for the tests: transparency-dev's omniwitness (Go, built by
``tests/go_tools.py``) on 127.0.0.1, configured to witness one log (origin and key)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from runtrail.audit import NoteSigner
from runtrail.audit.cosignature import WitnessVerifier
from tests.go_tools import go_tool


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Omniwitness:
    def __init__(self, url: str, verifier: WitnessVerifier) -> None:
        self.url = url
        self.verifier = verifier

    def post(self, body: str) -> tuple[int, str]:
        request = urllib.request.Request(f"{self.url}/add-checkpoint", body.encode(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()


@contextmanager
def omniwitness(
    folder: Path, origin: str, log_vkey: str, name: str = "witness.test/w1"
) -> Iterator[Omniwitness]:
    """An omniwitness that witnesses the log ``origin`` signed with ``log_vkey``."""
    binary = go_tool("omniwitness")
    key = NoteSigner(name, Ed25519PrivateKey.generate())
    (folder / "witness.key").write_text(key.skey())
    (folder / "logs.yaml").write_text(
        f'Logs:\n  - Origin: "{origin}"\n    PublicKey: "{log_vkey}"\n'
        '    URL: "http://127.0.0.1:9/"\n'
    )
    port = free_port()
    proc = subprocess.Popen(
        [str(binary), f"-listen=127.0.0.1:{port}", "-metrics_listen=",
         f"-private_key_path={folder / 'witness.key'}",
         f"-additional_logs={folder / 'logs.yaml'}", f"-db_file={folder / 'witness.db'}"],
        stdout=subprocess.DEVNULL, stderr=(folder / "witness.log").open("wb"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "omniwitness did not start:\n" + (folder / "witness.log").read_text()
                    ) from None
                time.sleep(0.1)
        yield Omniwitness(f"http://127.0.0.1:{port}", WitnessVerifier.of_signer(key))
    finally:
        proc.terminate()
        proc.wait(10)
