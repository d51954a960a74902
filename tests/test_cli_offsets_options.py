"""``runtrail offsets set SERVICE --to-latest``: the log end, i.e. skip everything not yet read.

A data-skipping move, so it is held to exactly what it names: the named group (not another
group reading the same topic), on the named topic (not the group's offsets on another topic),
every partition or only the ``--partition`` given, the group's committed offsets and the
service's own store positions alike; ``--dry-run`` writes nothing; a group with an active
member is refused, as every other move of the command is. Offsets are read back with plain
Kafka clients and the store itself, not through the command.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from runtrail.persistence import PROJECTIONS, open_store
from runtrail.resume.partitioning import partition_for
from runtrail_tools.cli.main import main
from tests.support import (
    committed_offsets,
    create_topic,
    end_offsets,
    form,
    produce_forms,
    unique_topic,
    wait_for,
)

PARTITIONS = 3
#: events per partition: every partition a different log end
EVENTS = {0: 2, 1: 3, 2: 4}
#: where the named group, the bystander group and the store stand before the move
GROUP_AT, OTHER_AT, STORE_AT = 1, 2, 1


def run_on(partition: int) -> str:
    return next(
        f"run-{i}" for i in range(1000) if partition_for(f"run-{i}", PARTITIONS) == partition
    )


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit ``offsets`` for ``group`` as a consumer of its own would (no group join)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


@dataclass
class Scene:
    bootstrap: str
    topic: str  # the events topic the command is pointed at
    elsewhere: str  # another topic the same group also reads
    group: str  # the group named
    other: str  # another group on the same topic
    store_url: str  # the projector's store, positions on both topics
    ends: dict[int, int]

    def cli(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(
            [
                "offsets",
                "set",
                "projector",
                "--group",
                self.group,
                f"-ostore_url={self.store_url}",
                *args,
                "--bootstrap-servers",
                self.bootstrap,
                "--events-topic",
                self.topic,
            ]
        )
        out = capsys.readouterr()
        return code, out.out, out.err

    def committed(self, group: str, topic: str | None = None) -> dict[int, int]:
        return committed_offsets(self.bootstrap, group, topic or self.topic, PARTITIONS)

    def stored(self, topic: str | None = None) -> dict[int, int]:
        store = open_store(PROJECTIONS, self.store_url)
        try:
            return store.stored_offsets(topic or self.topic, range(PARTITIONS))
        finally:
            store.close()

    def untouched(self) -> dict[str, dict[int, int]]:
        """What no move of (group, topic) may change: the other group, the other topic."""
        return {
            "other group": self.committed(self.other),
            "group elsewhere": self.committed(self.group, self.elsewhere),
            "store elsewhere": self.stored(self.elsewhere),
        }


@pytest.fixture
def scene(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Scene]:
    topic = create_topic(kafka_bootstrap, unique_topic("to-latest"), partitions=PARTITIONS)
    elsewhere = create_topic(kafka_bootstrap, unique_topic("to-latest-b"), partitions=PARTITIONS)
    produce_forms(
        kafka_bootstrap,
        topic,
        [
            form("STEP_END", run_on(p), s, {"reason": None})
            for p, count in EVENTS.items()
            for s in range(1, count + 1)
        ],
    )
    ends = end_offsets(kafka_bootstrap, topic, PARTITIONS)
    assert ends == EVENTS
    group, other = f"g-{uuid.uuid4().hex[:8]}", f"g-other-{uuid.uuid4().hex[:8]}"
    everywhere = dict.fromkeys(range(PARTITIONS), GROUP_AT)
    commit(kafka_bootstrap, group, topic, everywhere)
    commit(kafka_bootstrap, group, elsewhere, dict.fromkeys(range(PARTITIONS), 0))
    commit(kafka_bootstrap, other, topic, dict.fromkeys(range(PARTITIONS), OTHER_AT))
    store_url = f"sqlite:///{tmp_path / 'projection.db'}"
    store = open_store(PROJECTIONS, store_url)
    store.rewind_offsets(topic, dict.fromkeys(range(PARTITIONS), STORE_AT))
    store.rewind_offsets(elsewhere, dict.fromkeys(range(PARTITIONS), 0))
    store.close()
    yield Scene(kafka_bootstrap, topic, elsewhere, group, other, store_url, ends)


BEFORE = {
    "other group": dict.fromkeys(range(PARTITIONS), OTHER_AT),
    "group elsewhere": dict.fromkeys(range(PARTITIONS), 0),
    "store elsewhere": dict.fromkeys(range(PARTITIONS), 0),
}


def test_to_latest_moves_the_named_group_and_store_to_every_partitions_log_end(
    scene: Scene, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--to-latest`` puts the group's committed offset and the store's position at the log
    end of every partition of the named topic, and nothing else moves. Ignored or misread,
    a service an operator meant to skip past a backlog re-reads it (or skips on some
    partitions only), or another group or topic loses data it never agreed to skip."""
    code, out, err = scene.cli(capsys, "--to-latest")
    assert code == 0, err
    assert "move to the latest offset" in out and f"moved {PARTITIONS} partition(s)" in out
    assert scene.committed(scene.group) == scene.ends
    assert scene.stored() == scene.ends
    assert scene.untouched() == BEFORE
    # and `show` agrees: nothing left to read
    capsys.readouterr()
    assert main(
        ["offsets", "show", "projector", "--group", scene.group, f"-ostore_url={scene.store_url}",
         "--bootstrap-servers", scene.bootstrap, "--events-topic", scene.topic, "--json"]
    ) == 0  # fmt: skip
    shown = json.loads(capsys.readouterr().out)["partitions"]
    assert [(row["group"], row["store"], row["lag"]) for row in shown] == [
        (end, end, 0) for end in scene.ends.values()
    ]


def test_to_latest_with_partition_moves_only_that_partition(
    scene: Scene, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--to-latest --partition 1`` skips partition 1's backlog only. Applied to every
    partition instead, the events still waiting on the others are silently skipped."""
    code, out, err = scene.cli(capsys, "--to-latest", "--partition", "1")
    assert code == 0, err
    assert "moved 1 partition(s)" in out
    expected = {0: GROUP_AT, 1: scene.ends[1], 2: GROUP_AT}
    assert scene.committed(scene.group) == expected
    assert scene.stored() == {0: STORE_AT, 1: scene.ends[1], 2: STORE_AT}
    assert scene.untouched() == BEFORE


def test_to_latest_dry_run_prints_the_plan_and_writes_nothing(
    scene: Scene, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--to-latest --dry-run`` shows, per partition, the move to the log end and writes
    nothing, like every other target's dry run. Were the dry run ignored for this target,
    the look before the skip would be the skip."""
    code, out, err = scene.cli(capsys, "--to-latest", "--dry-run")
    assert code == 0, err
    assert "(dry run: nothing written)" in out and "moved" not in out
    for p, end in scene.ends.items():
        row = f"{p:>9} {GROUP_AT:>10} {STORE_AT:>10} {'->':>4} {end:>10}"
        assert row in out, out
    assert scene.committed(scene.group) == dict.fromkeys(range(PARTITIONS), GROUP_AT)
    assert scene.stored() == dict.fromkeys(range(PARTITIONS), STORE_AT)
    assert scene.untouched() == BEFORE
    # the same as the dry run of another target, but for the target column
    code, earliest, _ = scene.cli(capsys, "--to-earliest", "--dry-run")
    assert code == 0
    assert earliest.splitlines()[3:] != out.splitlines()[3:]
    assert [line.split()[:4] for line in earliest.splitlines()[3:]] == [
        line.split()[:4] for line in out.splitlines()[3:]
    ]


def test_to_latest_is_refused_while_the_group_has_an_active_member(
    scene: Scene, capsys: pytest.CaptureFixture[str]
) -> None:
    """With a live member in the group, ``--to-latest`` is refused (exit 1, naming the group
    and its member) and moves nothing, group or store, exactly as ``--to-earliest`` and
    ``--to-offset`` are; its dry run answers as theirs do. Were it let through, the live
    member would commit its own offsets over the skip (or keep serving from positions the
    store no longer holds)."""
    member = Consumer(
        {
            "bootstrap.servers": scene.bootstrap,
            "group.id": scene.group,
            "enable.auto.commit": False,
            "client.id": "live-member",
        }
    )
    member.subscribe([scene.topic])
    try:
        deadline = time.monotonic() + 30

        def joined() -> bool:
            member.poll(0.2)
            return bool(member.assignment()) or time.monotonic() > deadline

        wait_for(joined, 31, 0, what="the member to join")
        assert member.assignment(), "the member never joined"
        answers = {}
        for target in (["--to-latest"], ["--to-earliest"], ["--to-offset", "1"]):
            for dry in ([], ["--dry-run"]):
                code, _, err = scene.cli(capsys, *target, *dry)
                answers[(target[0], bool(dry))] = code
                assert "refused" in err and scene.group in err and "live-member" in err, err
        assert set(answers.values()) == {1}, answers
        assert scene.committed(scene.group) == dict.fromkeys(range(PARTITIONS), GROUP_AT)
        assert scene.stored() == dict.fromkeys(range(PARTITIONS), STORE_AT)
        assert scene.untouched() == BEFORE
    finally:
        member.close()
    # the member gone, the same command goes through
    wait_for(lambda: scene.cli(capsys, "--to-latest")[0] == 0, 30, 1, what="the move")
    assert scene.committed(scene.group) == scene.ends
