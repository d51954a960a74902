"""The group watch's clock (runtime.group_watch), fed librdkafka's ``cgrp`` statistics."""

from __future__ import annotations

from runtrail.runtime.group_watch import GroupWatch


def cgrp(state: str, join_state: str = "steady") -> dict[str, object]:
    """A ``cgrp`` object as librdkafka 2.x reports it (fields as in its STATISTICS.md)."""
    return {
        "state": state,
        "stateage": 4998,
        "join_state": join_state,
        "rebalance_age": 4943,
        "rebalance_cnt": 1,
        "rebalance_reason": "",
        "assignment_size": 6 if state == "up" else 0,
    }


def test_the_clock_runs_from_the_first_report_without_a_coordinator_across_state_flips() -> None:
    watch = GroupWatch(stuck_after_s=10)
    watch.observe(cgrp("up"), 0.0)
    assert watch.since is None and not watch.stuck(100.0)
    watch.observe(cgrp("query-coord", "wait-unassign-to-complete"), 5.0)
    watch.observe(cgrp("wait-coord", "wait-unassign-to-complete"), 10.0)  # librdkafka flips
    watch.observe(cgrp("query-coord", "wait-unassign-to-complete"), 14.9)
    assert watch.without_coordinator_s(14.9) == 9.9 and not watch.stuck(14.9)
    assert watch.stuck(15.0)
    assert "no group coordinator for 10s" in watch.describe(15.0)
    assert "state query-coord, join state wait-unassign-to-complete" in watch.describe(15.0)


def test_a_report_with_the_coordinator_stops_the_clock() -> None:
    watch = GroupWatch(stuck_after_s=10)
    watch.observe(cgrp("wait-broker-transport", "init"), 0.0)
    watch.observe(cgrp("up", "wait-join"), 8.0)  # joining: the coordinator is there
    assert watch.since is None and not watch.stuck(30.0)
    watch.observe(cgrp("query-coord"), 30.0)
    assert not watch.stuck(39.0) and watch.stuck(40.0)


def test_a_new_client_gets_a_whole_period_of_its_own() -> None:
    watch = GroupWatch(stuck_after_s=10)
    watch.observe(cgrp("query-coord"), 0.0)
    assert watch.stuck(12.0)
    watch.restart(12.0)
    assert not watch.stuck(21.0) and watch.stuck(22.0)


def test_a_consumer_without_a_group_is_never_stuck() -> None:
    watch = GroupWatch(stuck_after_s=1)
    watch.observe(cgrp("query-coord"), 0.0)
    watch.observe(None, 5.0)  # assign()-only consumers report no cgrp
    assert not watch.stuck(100.0)
    watch.observe({}, 100.0)
    assert not watch.stuck(200.0)


def broker(source: str, state: str = "UP") -> dict[str, object]:
    """A ``brokers`` entry as librdkafka 2.x reports it (the fields the watch reads and some)."""
    return {"name": "127.0.0.1:9092/1", "nodeid": 1, "source": source, "state": state}


def test_a_client_that_knows_no_broker_but_the_coordinators_is_stuck_after_ten_seconds() -> None:
    """What the stuck client was: its only broker dropped, no re-bootstrap, no way back."""
    watch = GroupWatch(stuck_after_s=120)
    down = [broker("learned", "DOWN"), broker("logical", "INIT")]
    watch.observe(cgrp("query-coord"), 0.0, down)  # an outage: the broker is known, down
    assert watch.client.since is None and not watch.stuck(60.0)
    orphaned = [broker("logical", "TRY_CONNECT")]
    watch.observe(cgrp("query-coord"), 60.0, orphaned)
    watch.observe(cgrp("query-coord"), 65.0, orphaned)
    assert not watch.stuck(69.9) and watch.stuck(70.0)
    assert "the Kafka client has known no broker for 10s" in watch.describe(70.0)
    watch.restart(70.0)
    assert not watch.stuck(75.0)  # the new client starts with the configured brokers


def test_a_re_bootstrap_between_two_reports_is_not_an_orphan() -> None:
    watch = GroupWatch(stuck_after_s=120)
    watch.observe(cgrp("query-coord"), 0.0, [broker("logical")])  # a report in between
    watch.observe(cgrp("query-coord"), 5.0, [broker("configured", "TRY_CONNECT")])
    assert watch.client.since is None and not watch.stuck(30.0)
