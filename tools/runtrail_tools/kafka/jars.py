"""The broker's classpath: Java found and checked, jars fetched by Maven once and cached.

Maven resolves ``deploy/kafka/pom.xml`` into ``<cache>/<kafka version>/libs``; a marker file
holds the pom's digest so that a changed pom (say, a logging fix) refetches, and a file lock
keeps concurrent test sessions from fetching into the same folder at once. An unpacked
Apache Kafka distribution (``KAFKA_HOME``) is used as it is instead.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runtrail.kafka.errors import BrokerError
from runtrail_tools.kafka.deploy import kafka_version

MIN_JAVA = 17
KAFKA_HOME_ENV = "KAFKA_HOME"
_MARKER = "libs.pom-sha256"
_MVN_TIMEOUT_S = 900.0


def parse_java_version(text: str) -> int:
    """Major version from ``java -version`` output: ``"1.8.0_392"`` is 8, ``"17.0.15"`` 17."""
    match = re.search(r'version "([^"]+)"', text)
    if match is None:
        raise BrokerError(f"cannot read the Java version from: {text.strip()[:200]!r}")
    parts = re.split(r"[.\-+_]", match.group(1))
    major = int(parts[0]) if parts[0].isdigit() else 0
    if major == 1 and len(parts) > 1 and parts[1].isdigit():
        major = int(parts[1])
    return major


def find_java() -> str:
    """Path of a ``java`` of at least version 17 (``JAVA_HOME`` first, then ``PATH``)."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "java" if java_home else None
    java = str(candidate) if candidate and candidate.is_file() else shutil.which("java")
    if java is None:
        raise BrokerError(
            f"java not found: the local Kafka broker needs Java {MIN_JAVA}+ "
            "(e.g. apt-get install openjdk-17-jdk-headless)"
        )
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrokerError(f"cannot run {java} -version: {exc}") from exc
    major = parse_java_version(done.stderr + done.stdout)
    if major < MIN_JAVA:
        raise BrokerError(f"{java} is Java {major}; Kafka 4 needs Java {MIN_JAVA} or newer")
    return java


def distribution_libs(kafka_home: Path | None = None) -> Path | None:
    """``<KAFKA_HOME>/libs`` when a distribution is given (argument, else env), else None."""
    if kafka_home is None:
        env = os.environ.get(KAFKA_HOME_ENV)
        if not env:
            return None
        kafka_home = Path(env)
    libs = kafka_home.expanduser().resolve() / "libs"
    if not any(libs.glob("kafka_2.*.jar")):
        raise BrokerError(
            f"KAFKA_HOME={kafka_home} is not an unpacked Apache Kafka distribution "
            "(no libs/kafka_2.*.jar); unset it to fetch the broker with Maven"
        )
    return libs


def _digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def _is_complete(libs: Path, marker: Path, digest: str) -> bool:
    try:
        recorded = marker.read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return recorded == digest and any(libs.glob("kafka_2.*.jar"))


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_maven(pom: Path, output_dir: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError(
            "mvn not found: Maven fetches the Kafka broker jars (apt-get install maven), "
            f"or point {KAFKA_HOME_ENV} at an unpacked Apache Kafka distribution"
        )
    command = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={output_dir}",
        "-DincludeScope=runtime",
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=_MVN_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise BrokerError(f"Maven did not fetch the broker jars in {_MVN_TIMEOUT_S:.0f}s") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
        raise BrokerError(
            f"Maven failed to fetch the broker jars (exit {done.returncode}):\n{tail}"
        )


def fetch_jars(cache_dir: Path, pom: Path) -> Path:
    """``<cache_dir>/<kafka version>/libs``, fetched by Maven unless already complete."""
    version_dir = cache_dir.expanduser().resolve() / kafka_version(pom)
    libs = version_dir / "libs"
    marker = version_dir / _MARKER
    digest = _digest(pom)
    if _is_complete(libs, marker, digest):
        return libs
    with _locked(version_dir / ".lock"):
        if _is_complete(libs, marker, digest):  # another process fetched while we waited
            return libs
        staging = version_dir / f"libs.tmp-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            _run_maven(pom, staging)
            if not any(staging.glob("kafka_2.*.jar")):
                raise BrokerError(f"Maven ran but {staging} holds no kafka_2.*.jar")
            marker.unlink(missing_ok=True)
            shutil.rmtree(libs, ignore_errors=True)
            staging.rename(libs)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        marker.write_text(digest + "\n", encoding="utf-8")
    return libs
