"""Messages of partitions a ``consume()`` call's own rebalance took away are left to their next
owner (runtime.rebalance_window); everything else is kept, in order."""

from __future__ import annotations

from confluent_kafka import Message

from runtrail.runtime.rebalance_window import RebalanceWindow

TOPIC = "events"


def fetched(*points: tuple[int, int]) -> list[Message]:
    return [Message(topic=TOPIC, partition=p, offset=o, value=b"v") for p, o in points]


def points(messages: list[Message]) -> list[tuple[int | None, int | None]]:
    return [(m.partition(), m.offset()) for m in messages]


def test_a_call_without_a_rebalance_keeps_everything() -> None:
    window = RebalanceWindow()
    window.opened()
    batch = fetched((0, 5), (1, 7), (0, 6))
    assert window.from_the_call(batch) is batch
    assert window.from_before(batch) is batch


def test_a_revoked_partitions_messages_are_left_and_the_others_kept_in_order() -> None:
    """Cooperative: one partition of two is revoked; eager revokes all (then all are left)."""
    window = RebalanceWindow()
    window.opened()
    window.took_away([(TOPIC, 0)])
    batch = fetched((0, 5), (1, 7), (0, 6), (1, 8))
    assert points(window.from_the_call(batch)) == [(1, 7), (1, 8)]
    window.opened()
    window.took_away([(TOPIC, 0), (TOPIC, 1)])
    assert window.from_the_call(batch) == []


def test_revoked_and_assigned_again_in_one_call_keeps_that_calls_messages() -> None:
    """They are the new assignment's: its fetch barrier purged the old ones within the call."""
    window = RebalanceWindow()
    window.opened()
    window.took_away([(TOPIC, 0), (TOPIC, 1)])
    window.gave([(TOPIC, 0)])
    batch = fetched((0, 0), (1, 9), (0, 1))
    assert points(window.from_the_call(batch)) == [(0, 0), (0, 1)]


def test_messages_of_an_earlier_call_are_left_even_when_the_partition_came_back() -> None:
    """A batch gathered over two calls: what the first call fetched belongs to the assignment
    the second call ended, whether or not the partition was assigned again in it."""
    window = RebalanceWindow()
    window.opened()
    earlier = fetched((0, 40), (1, 12))
    window.opened()
    window.took_away([(TOPIC, 0), (TOPIC, 1)])
    window.gave([(TOPIC, 0), (TOPIC, 1)])
    assert window.from_before(earlier) == []
    window.opened()  # the next call: no rebalance in it
    assert window.from_before(earlier) is earlier


def test_other_topics_are_not_confused_with_the_revoked_one() -> None:
    window = RebalanceWindow()
    window.opened()
    window.took_away([("other", 0)])
    batch = fetched((0, 1))
    assert window.from_the_call(batch) == batch
