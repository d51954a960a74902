"""pytest plugin: the suite in tiers, and an order that keeps every worker busy to the end.

Each test gets one tier marker from what it uses, so no test file has to say it:

- ``fault``: a broker it kills, stops or restarts (the ``restartable_broker`` and
  ``restartable_cluster`` fixtures), or an explicit ``@pytest.mark.fault``;
- ``stack``: a whole stack of services, the demo, or a whole install from a clean clone (a
  fixture named ``stack``, as every such test file calls its stack, or an explicit
  ``@pytest.mark.stack``);
- ``kafka``: the worker's shared broker (the ``kafka_bootstrap`` fixture), a cluster no test
  stops (``kafka_cluster``), or ``@pytest.mark.kafka`` for a test that starts a broker of its own
  without the fixture;
- ``unit``: none of these: no broker at all (``make test-fast`` runs this tier).

Under ``pytest-xdist --dist loadgroup`` (``make test``) the unit of work handed to a free worker
is one test, except:

- a file whose tests share a fixture wider than a test (a module-scoped stack, demo or store) is
  one unit, so that fixture is built once rather than once on every worker that gets one of its
  tests;
- the ``fault`` units are dealt into ``RUNTRAIL_FAULT_LANES`` lanes (default 3), each run one
  after another by one worker, so at most that many test brokers are down at once (each fault
  test kills only a broker of its own). 1 lane is the strictest, and the slowest: the fault
  tests alone take about 21 minutes one after another (1,282 s on a quiet 2-core machine), more
  than the suite's 15-minute budget; with 2 the longer lane set the suite's end (its worker
  busy 688 s while the other five were done by 594 s); 3 leaves them shorter than the rest.

Units are ordered heaviest first (from ``tests/durations.json``, which ``--record-durations``
writes anew; xdist's own reordering by test count is turned off), so the long ones start early
and the end of the run is short tests on every worker rather than one long unit on one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

TIERS = ("unit", "kafka", "stack", "fault")
#: fixtures whose broker the test kills, stops or restarts
FAULT_FIXTURES = frozenset({"restartable_broker", "restartable_cluster"})
#: fixtures that start a whole stack of services
STACK_FIXTURES = frozenset({"stack"})
#: fixtures that give a test a broker or cluster it does not stop
KAFKA_FIXTURES = frozenset({"kafka_bootstrap", "kafka_cluster"})
#: how many lanes the fault tests are dealt into (xdist groups ``fault-lane-N``)
LANES_ENV = "RUNTRAIL_FAULT_LANES"
#: each test's recorded seconds (``RUNTRAIL_TEST_DURATIONS`` names another file, for tests of this)
DURATIONS = Path(
    os.environ.get("RUNTRAIL_TEST_DURATIONS") or Path(__file__).with_name("durations.json")
)
#: the guess for a test not in the durations file (new, renamed): about a median kafka test
UNKNOWN_S = 2.0

_recorded: dict[str, float] = {}


def tier_of(item: pytest.Item) -> str:
    """The tier of one test: the heaviest thing it uses."""
    fixtures = set(getattr(item, "fixturenames", ()))
    marks = {mark.name for mark in item.iter_markers()}
    if "fault" in marks or fixtures & FAULT_FIXTURES:
        return "fault"
    if "stack" in marks or fixtures & STACK_FIXTURES:
        return "stack"
    if "kafka" in marks or fixtures & KAFKA_FIXTURES:
        return "kafka"
    return "unit"


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        metavar="PATH",
        help="write each test's duration (setup + call + teardown, seconds) to PATH as JSON, "
        "for the longest-first order (tests/durations.json)",
    )


def pytest_configure(config: pytest.Config) -> None:
    for tier in TIERS:
        config.addinivalue_line("markers", f"{tier}: test tier (tests/tiers.py)")
    # the groups are xdist's; registered here too so that a run without xdist accepts them
    config.addinivalue_line("markers", "xdist_group(name): tests/tiers.py's unit of work")
    # xdist would reorder the units by their number of tests; keep the heaviest-first order
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


#: scopes of a fixture that the tests of a file share: those tests are one unit of work
SHARED_SCOPES = frozenset({"package", "module", "class"})


def shares_a_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture built once for several tests of its file."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope in SHARED_SCOPES for defs in info.name2fixturedefs.values())


def unit_of(item: pytest.Item) -> str:
    """The unit of work the test belongs to: its file's, when it shares a fixture, else its own."""
    return item.nodeid.split("::", 1)[0] if shares_a_fixture(item) else item.nodeid


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test's tier, group the units, deal the fault units into lanes, heaviest first.

    Runs before xdist's own hook, which reads the ``xdist_group`` marks. The order depends only
    on the collected names and the durations file, so every worker collects the same order."""
    durations = load_durations()
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        tier = tier_of(item)
        if tier not in {mark.name for mark in item.iter_markers()}:
            item.add_marker(getattr(pytest.mark, tier))
        units.setdefault(unit_of(item), []).append(item)

    def weight(members: list[pytest.Item]) -> float:
        return sum(durations.get(member.nodeid, UNKNOWN_S) for member in members)

    group_of: dict[str, str] = {}
    weights: dict[str, float] = {}
    lanes = [0.0] * max(1, int(os.environ.get(LANES_ENV, "3")))
    for unit, members in sorted(units.items(), key=lambda kv: (-weight(kv[1]), kv[0])):
        if any(member.get_closest_marker("fault") is not None for member in members):
            lane = lanes.index(min(lanes))  # heaviest first, each to the lightest lane so far
            lanes[lane] += weight(members)
            group_of[unit] = f"fault-lane-{lane}"
        elif len(members) > 1:
            group_of[unit] = f"file-{unit}"
        else:
            group_of[unit] = unit
    for unit, members in units.items():
        group = group_of[unit]
        weights[group] = weights.get(group, 0.0) + weight(members)
        if group != unit or len(members) > 1:
            for member in members:
                member.add_marker(pytest.mark.xdist_group(group))
    # within a group, heaviest unit first; within a unit (a file sharing a fixture), the file's
    # own order: its tests may build on one another (a shared topic one of them publishes more to)
    unit_weight = {unit: weight(members) for unit, members in units.items()}
    position = {item.nodeid: i for i, item in enumerate(items)}
    items.sort(
        key=lambda item: (
            -weights[group_of[unit_of(item)]],
            group_of[unit_of(item)],
            -unit_weight[unit_of(item)],
            unit_of(item),
            position[item.nodeid],
        )
    )


#: seconds each xdist worker spent in tests (the controller's view), for the summary
_busy: dict[str, float] = {}
#: the ``figures`` a test recorded (``record_property("figures", …)``): measurements for reports
_figures: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _figures.extend(str(v) for k, v in report.user_properties if k == "figures")
    if report.when in ("setup", "call", "teardown"):
        nodeid = report.nodeid.split("@", 1)[0]  # xdist appends @group to grouped tests
        _recorded[nodeid] = _recorded.get(nodeid, 0.0) + report.duration
        node = getattr(report, "node", None)  # set on the controller: the worker that ran it
        worker = getattr(node, "gateway", None)
        if worker is not None:
            _busy[worker.id] = _busy.get(worker.id, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The figures tests recorded; how long each worker was busy (a worker far below the others
    idled at the end)."""
    for line in _figures:
        terminalreporter.write_line(line)
    if _busy:
        busy = ", ".join(f"{w} {s:.0f} s" for w, s in sorted(_busy.items()))
        terminalreporter.write_line(f"busy per worker: {busy}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--record-durations")
    if not path or hasattr(session.config, "workerinput"):
        return  # the controller has every worker's reports; a worker writes nothing
    merged: dict[str, Any] = {**load_durations(Path(path)), **_recorded}
    ordered = dict(sorted((k, round(v, 2)) for k, v in merged.items()))
    Path(path).write_text(json.dumps(ordered, indent=0) + "\n", encoding="utf-8")
