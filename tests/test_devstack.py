"""The local stack's pieces that need no broker: the port table, service settings, state."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtrail.config import Settings
from runtrail.runtime.registry import SERVICES, service_class
from runtrail_tools.devstack.ports import (
    AGENT_OFFSET,
    DEFAULT_BASE,
    METRICS_OFFSETS,
    find_free_base,
    plan_ports,
)
from runtrail_tools.devstack.scrape import parse
from runtrail_tools.devstack.service_settings import (
    DEV_TUNING,
    STACK_RECEIVERS,
    importable,
    settings_info,
)
from runtrail_tools.devstack.stack import DevStack, StackError, StackOptions, stack_names
from runtrail_tools.devstack.state import ProcessRecord, StackState


def test_every_registered_service_gets_a_distinct_port_and_the_table_shifts_whole() -> None:
    names = [*SERVICES, "future-service"]
    plan = plan_ports(names, DEFAULT_BASE, with_api=["resume-cache", "sessions"])
    ports = [*plan.metrics.values(), *plan.api.values(), plan.agent]
    assert len(ports) == len(set(ports))
    assert plan.metrics["future-service"] not in {
        DEFAULT_BASE + o for o in METRICS_OFFSETS.values()
    }
    assert plan.api == {"resume-cache": 9421, "sessions": 9431}
    assert plan.agent == DEFAULT_BASE + AGENT_OFFSET
    moved = plan_ports(names, 30000, with_api=["resume-cache", "sessions"])
    assert {k: v - 30000 for k, v in moved.metrics.items()} == {
        k: v - DEFAULT_BASE for k, v in plan.metrics.items()
    }


def test_the_table_agrees_with_the_services_own_default_ports() -> None:
    """Where a service's own default port differs from the table, the table is what every
    deployment file uses; only a real conflict (two services on one default) is reported."""
    defaults: dict[int, list[str]] = {}
    for name in SERVICES:
        if importable(name):
            defaults.setdefault(service_class(name).default_port, []).append(name)
    table = plan_ports(list(SERVICES)).metrics
    for name in SERVICES:
        if name in METRICS_OFFSETS and importable(name):
            own = service_class(name).default_port
            if len(defaults[own]) == 1:  # an unshared default must be the table's
                assert table[name] == own, f"{name}: table {table[name]}, service {own}"


def test_every_services_settings_class_is_found_with_its_prefix() -> None:
    for name in SERVICES:
        if not importable(name):
            continue
        info = settings_info(name)
        assert info.cls is not None, f"{name}: no settings class found"
        assert info.env_prefix == f"RUNTRAIL_{name.upper().replace('-', '_')}_"


def test_dev_tuning_names_real_fields() -> None:
    """If a service renames a tuned field, this fails instead of the tuning silently lapsing."""
    for name, values in DEV_TUNING.items():
        info = settings_info(name)
        if info.cls is None:
            continue
        missing = [key for key in values if not info.has(key)]
        assert not missing, f"{name} has no field(s) {missing}"


def test_service_env_only_sets_fields_the_service_has(tmp_path: Path) -> None:
    stack = DevStack(Settings(state_dir=tmp_path), StackOptions(port_base=31000))
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"acme": "t-acme"}')
    state = StackState(
        state_dir=str(tmp_path),
        bootstrap_servers="127.0.0.1:1",
        events_topic="e",
        dlq_topic="d",
        broker="external",
        port_base=31000,
        agent_port=31090,
        tokens_file=str(tokens),
    )
    names = [n for n in stack_names() if importable(n)]
    assert set(STACK_RECEIVERS) <= set(names)
    plan = stack.plan(names)
    for name in names:
        env = stack.service_env(name, plan, state)
        info = settings_info(name)
        for var in env:
            assert var.startswith(info.env_prefix) and info.has(var[len(info.env_prefix) :].lower())
        if name in plan.api:
            assert env[info.env_name("http_port")] == str(plan.api[name])
    # the command API answers the stack's tenant tokens on its own API port
    command_api = stack.service_env("command-api", plan, state)
    assert command_api["RUNTRAIL_COMMAND_API_TOKENS_FILE"] == str(tokens)
    assert command_api["RUNTRAIL_COMMAND_API_HTTP_PORT"] == str(plan.api["command-api"])
    # the relay's transactional.id is the stack's own: a second stack's relay fences it not
    relay = stack.service_env("outbox-relay", plan, state)
    assert relay["RUNTRAIL_OUTBOX_RELAY_TRANSACTIONAL_ID"] == "runtrail.outbox-relay"
    other = DevStack(Settings(state_dir=tmp_path), StackOptions(group_prefix="t1"))
    assert (
        other.service_env("outbox-relay", plan, state)["RUNTRAIL_OUTBOX_RELAY_TRANSACTIONAL_ID"]
        == "t1.outbox-relay"
    )


def test_the_receivers_get_ports_of_their_own_and_no_consumer_group(tmp_path: Path) -> None:
    """Beside the services, the ui and the demo agent; a free base leaves their ports free."""
    stack = DevStack(Settings(state_dir=tmp_path), StackOptions(port_base=DEFAULT_BASE))
    selection = stack.select()
    assert selection.run == [n for n in stack_names() if n not in selection.skipped]
    assert set(STACK_RECEIVERS) <= set(selection.run)
    plan = stack.plan(selection.run)
    taken = [*plan.metrics.values(), *plan.api.values(), plan.agent, plan.ui]
    assert len(taken) == len(set(taken))
    assert plan.metrics["outbox-relay"] == 9470 and "outbox-relay" not in plan.api
    assert (plan.metrics["command-api"], plan.api["command-api"]) == (9500, 9501)
    from runtrail_tools.kafka.ports import port_bindable

    base = find_free_base(SERVICES)  # callers name the services only: receivers still fit
    assert all(port_bindable(p - DEFAULT_BASE + base) for p in taken)


def test_state_round_trips_and_unknown_services_are_refused(tmp_path: Path) -> None:
    state = StackState(
        state_dir=str(tmp_path),
        bootstrap_servers="127.0.0.1:9092",
        events_topic="runtrail.events",
        dlq_topic="runtrail.events.dlq",
        broker="local",
        port_base=9400,
        agent_port=9490,
        services={"noop": ProcessRecord("noop", 123, 9400, "runtrail.noop")},
    )
    state.save()
    loaded = StackState.load(tmp_path)
    assert loaded == state
    assert loaded.all_ports() == [9400]
    stack = DevStack(Settings(state_dir=tmp_path), StackOptions(services=["no-such"]))
    with pytest.raises(StackError, match="unknown service"):
        stack.select()


def test_scrape_sums_samples_by_labels() -> None:
    text = (
        'runtrail_consumer_lag{service="x",topic="t",partition="0"} 3.0\n'
        'runtrail_consumer_lag{service="x",topic="t",partition="1"} 4.0\n'
        'runtrail_dead_lettered_total{service="x",reason="undecodable"} 2.0\n'
    )
    scrape = parse(text)
    assert scrape.total("runtrail_consumer_lag") == 7
    assert scrape.total("runtrail_consumer_lag", partition="1") == 4
    assert scrape.total("runtrail_processed_total") is None
    assert scrape.by_label("runtrail_dead_lettered_total", "reason") == {"undecodable": 2}


def test_a_free_base_is_free() -> None:
    from runtrail_tools.kafka.ports import port_bindable

    base = find_free_base(SERVICES)
    plan = plan_ports(list(SERVICES), base)
    assert all(port_bindable(p) for p in [*plan.metrics.values(), plan.agent])
