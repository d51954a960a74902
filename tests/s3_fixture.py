"""Pytest plugin: a real S3 endpoint on 127.0.0.1, served by moto's threaded server.

``moto_s3`` (session scope) starts the server on a free port, creates one bucket and yields
its coordinates; ``s3_url`` (per test) hands each test its own key prefix in that bucket, as a
sink URL carrying endpoint, region, credentials and ``allow_http`` in its query. Add this
module to ``pytest_plugins`` in the root conftest, or import the fixtures into a test module.
"""

from __future__ import annotations

import logging
import re
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest

BUCKET = "runtrail-test"
REGION = "us-east-1"
ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing"


@dataclass(frozen=True)
class S3Endpoint:
    """Where the test S3 server listens, and how to reach its bucket."""

    endpoint_url: str
    bucket: str
    region: str
    access_key_id: str
    secret_access_key: str

    def options(self) -> dict[str, str]:
        """obstore options for this endpoint (also usable as URL query parameters)."""
        return {
            "endpoint": self.endpoint_url,
            "region": self.region,
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "allow_http": "true",
        }

    def url(self, prefix: str = "", **extra: str) -> str:
        """``s3://<bucket>/<prefix>?<options>`` for a sink or a reader."""
        path = f"/{prefix.strip('/')}" if prefix.strip("/") else ""
        return f"s3://{self.bucket}{path}?{urlencode({**self.options(), **extra})}"


#: moto imports its S3 backend on the first request: seconds of CPU, many more on a loaded
#: machine (CI's workers), so the first request may take this long
FIRST_REQUEST_TIMEOUT_S = 120


def _create_bucket(endpoint_url: str, bucket: str) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(f"{endpoint_url}/{bucket}", method="PUT")
    with opener.open(request, timeout=FIRST_REQUEST_TIMEOUT_S) as response:
        if response.status != 200:
            raise RuntimeError(f"cannot create bucket {bucket}: HTTP {response.status}")


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[S3Endpoint]:
    """A moto S3 server on 127.0.0.1 with one bucket, for the whole session."""
    from moto.server import ThreadedMotoServer  # a third of a second: only where S3 is used

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = S3Endpoint(
            endpoint_url=f"http://{host}:{port}",
            bucket=BUCKET,
            region=REGION,
            access_key_id=ACCESS_KEY_ID,
            secret_access_key=SECRET_ACCESS_KEY,
        )
        _create_bucket(endpoint.endpoint_url, endpoint.bucket)
        yield endpoint
    finally:
        server.stop()


@pytest.fixture
def s3_url(moto_s3: S3Endpoint, request: pytest.FixtureRequest) -> str:
    """A sink URL under a key prefix of its own for this test."""
    prefix = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")
    return moto_s3.url(f"t/{prefix}")
