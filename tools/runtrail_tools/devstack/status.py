"""``dev status``: one row per process, the numbers read from each process's own ``/metrics``."""

from __future__ import annotations

from dataclasses import dataclass

from runtrail_tools.devstack.scrape import fetch, ready
from runtrail_tools.devstack.stack import DevStack
from runtrail_tools.devstack.state import StackState


@dataclass(frozen=True)
class StatusRow:
    service: str
    pid: int | None
    state: str  # ready, starting, down, n/a
    group: str
    lag: float | None
    processed: float | None
    metrics_url: str

    def cells(self) -> list[str]:
        def num(value: float | None) -> str:
            return "-" if value is None else f"{value:.0f}"

        return [
            self.service,
            "-" if self.pid is None else str(self.pid),
            self.state,
            self.group or "-",
            num(self.lag),
            num(self.processed),
            self.metrics_url,
        ]


HEADER = ["SERVICE", "PID", "STATE", "CONSUMER GROUP", "LAG", "PROCESSED", "METRICS"]


def rows(stack: DevStack, state: StackState) -> list[StatusRow]:
    """The broker, every recorded service, and Prometheus if the stack runs one."""
    out: list[StatusRow] = []
    if state.broker == "local":
        broker = stack.broker()
        out.append(
            StatusRow(
                "kafka", broker.pid, "up" if broker.pid else "down", "-", None, None,
                state.bootstrap_servers,
            )
        )  # fmt: skip
    else:
        out.append(StatusRow("kafka", None, "external", "-", None, None, state.bootstrap_servers))
    alive = stack.running(state)
    for name, record in state.services.items():
        scrape = fetch(record.metrics_url) if alive[name] else None
        if not alive[name]:
            condition = "down"
        elif ready(record.metrics_port):
            condition = "ready"
        else:
            condition = "starting"
        out.append(
            StatusRow(
                service=name,
                pid=record.pid if alive[name] else None,
                state=condition,
                group=record.group or "-",
                lag=scrape.total("runtrail_consumer_lag") if scrape else None,
                processed=scrape.total("runtrail_processed_total") if scrape else None,
                metrics_url=record.metrics_url,
            )
        )
    if state.prometheus is not None:
        p = state.prometheus
        from runtrail_tools.devstack import procs

        up = procs.runs(p.pid, stack.prometheus_marker())
        out.append(
            StatusRow(
                "prometheus", p.pid if up else None, "up" if up else "down", "-", None, None,
                f"http://127.0.0.1:{p.metrics_port}",
            )
        )  # fmt: skip
    if state.ui is not None:
        from runtrail_tools.devstack import procs

        up = procs.runs(state.ui.pid, stack.ui_marker())
        out.append(
            StatusRow(
                "ui", state.ui.pid if up else None, "up" if up else "down", "-", None, None,
                state.ui_url or "",
            )
        )  # fmt: skip
    return out


def format_table(table: list[StatusRow]) -> str:
    cells = [HEADER, *(r.cells() for r in table)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )
