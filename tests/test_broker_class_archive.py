"""The broker's class-data archive: written once by a broker stopped cleanly, then mapped by
every later start; never by a broker killed, never over the operator's own sharing options."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from runtrail.config import Settings
from runtrail_tools.kafka.broker import LocalBroker
from runtrail_tools.kafka.class_archive import ClassArchive
from runtrail_tools.kafka.deploy import kafka_pom, kafka_version
from runtrail_tools.kafka.jars import fetch_jars
from runtrail_tools.kafka.ports import free_ports


def _archive(tmp_path: Path) -> ClassArchive:
    libs = tmp_path / "libs"
    libs.mkdir(exist_ok=True)
    (libs / "a.jar").write_bytes(b"jar")
    return ClassArchive.of(tmp_path / "cache", "/usr/bin/java", libs)


def test_a_start_without_the_archive_writes_one_of_its_own_and_with_it_maps_it(
    tmp_path: Path,
) -> None:
    archive = _archive(tmp_path)
    options, written = archive.for_broker(["-XX:TieredStopAtLevel=1"])
    assert written is not None and options == [f"-XX:ArchiveClassesAtExit={written}"]
    _, other = archive.for_broker([])
    assert other is not None and other != written  # two writers never share a file
    assert archive.reading([]) == []  # a tool never writes one
    written.write_bytes(b"archive")
    archive.adopt(written)
    assert archive.path.read_bytes() == b"archive" and not written.exists()
    other.write_bytes(b"later")
    archive.adopt(other)  # the first kept stays
    assert archive.path.read_bytes() == b"archive" and not other.exists()
    options, written = archive.for_broker([])
    assert written is None
    assert options == [f"-XX:SharedArchiveFile={archive.path}", "-Xshare:auto"]


def test_the_operators_own_sharing_options_are_left_alone(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/x.jsa", "-XX:ArchiveClassesAtExit=/y"):
        assert archive.for_broker([own]) == ([], None)
        assert archive.reading([own]) == []


def test_another_jdk_or_other_jars_key_another_archive(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    libs = tmp_path / "libs"
    assert ClassArchive.of(tmp_path / "cache", "/opt/jdk25/bin/java", libs) != archive
    (libs / "b.jar").write_bytes(b"another jar")
    assert ClassArchive.of(tmp_path / "cache", "/usr/bin/java", libs) != archive


def test_a_file_left_by_a_killed_writer_goes_after_an_hour(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    _, written = archive.for_broker([])
    assert written is not None
    written.write_bytes(b"half")
    hour_ago = time.time() - 3700
    os.utime(written, (hour_ago, hour_ago))
    archive.for_broker([])
    assert not written.exists()


def _maps(pid: int, path: Path) -> bool:
    return str(path) in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.kafka
def test_a_broker_stopped_cleanly_leaves_the_archive_the_next_one_maps(tmp_path: Path) -> None:
    """With a cache folder of its own (the jars linked in), so no other broker shares it."""
    settings = Settings()
    real_libs = fetch_jars(settings.kafka_cache_dir, kafka_pom())
    # the suite's JVM options (the C1 compiler alone under make test): the archive does not
    # depend on them, and three brokers start here
    suite_jvm_options = settings.kafka_jvm_options.split()
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / kafka_version(kafka_pom())).symlink_to(real_libs.parent)
    assert fetch_jars(cache, kafka_pom()).parent.parent == cache  # complete as linked

    def broker(name: str) -> LocalBroker:
        port, controller = free_ports(2)
        return LocalBroker(
            tmp_path / name, port, controller, cache_dir=cache, jvm_options=suite_jvm_options
        )

    first = broker("first")
    first.start(timeout=120)
    state = first.read_state()
    assert state is not None and state.class_archive and state.class_archive_written
    archive = Path(state.class_archive)
    assert not archive.exists()
    # killed: it writes nothing, and what it would have written is not kept
    assert first.pid is not None
    os.killpg(first.pid, signal.SIGKILL)
    first.stop()
    assert not archive.exists() and not Path(state.class_archive_written).exists()

    second = broker("second")
    second.start(timeout=120)
    second.stop(timeout=120)  # cleanly: the JVM writes the archive at its exit
    assert archive.is_file() and archive.stat().st_size > 1_000_000

    third = broker("third")
    third.start(timeout=120)
    try:
        assert third.pid is not None and _maps(third.pid, archive)
        state = third.read_state()
        assert state is not None and state.class_archive_written is None
    finally:
        third.stop()
