"""``<state_dir>/dev/stack.json``: what ``dev up`` started, so ``status`` and ``down`` (from any
shell, with any environment) find the same processes, ports and topics."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runtrail.files import private_dir


@dataclass(frozen=True)
class ProcessRecord:
    """One process of the stack: a service (or Prometheus) and where it listens."""

    name: str
    pid: int
    metrics_port: int
    group: str | None = None
    api_port: int | None = None
    log: str = ""
    started_at: str = ""

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def api_url(self) -> str | None:
        return None if self.api_port is None else f"http://127.0.0.1:{self.api_port}"

    def ports(self) -> list[int]:
        return [p for p in (self.metrics_port, self.api_port) if p is not None]


@dataclass
class StackState:
    """The whole stack as recorded at ``dev up``."""

    state_dir: str
    bootstrap_servers: str
    events_topic: str
    dlq_topic: str
    #: "local" when ``dev up`` started (and ``dev down`` stops) the broker; else "external".
    broker: str
    port_base: int
    agent_port: int
    services: dict[str, ProcessRecord] = field(default_factory=dict)
    prometheus: ProcessRecord | None = None
    #: The run explorer (``runtrail ui``), when ``dev up`` started it.
    ui: ProcessRecord | None = None
    tokens_file: str | None = None
    #: Environment every service process got (no secrets: tokens travel in files).
    env: dict[str, str] = field(default_factory=dict)

    @property
    def ui_url(self) -> str | None:
        """Where the run explorer of this stack answers (None: not started)."""
        return None if self.ui is None else f"http://127.0.0.1:{self.ui.metrics_port}/"

    @staticmethod
    def path_in(state_dir: Path) -> Path:
        return state_dir / "dev" / "stack.json"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StackState:
        services = {k: ProcessRecord(**v) for k, v in data.pop("services", {}).items()}
        prom = data.pop("prometheus", None)
        ui = data.pop("ui", None)
        return cls(
            **data,
            services=services,
            prometheus=ProcessRecord(**prom) if prom else None,
            ui=ProcessRecord(**ui) if ui else None,
        )

    @classmethod
    def load(cls, state_dir: Path) -> StackState | None:
        """The recorded stack, or None when there is none (or it cannot be read)."""
        try:
            raw = json.loads(cls.path_in(state_dir).read_text(encoding="utf-8"))
            return cls.from_json(raw)
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def save(self) -> Path:
        """Write atomically: a reader never sees half a file."""
        path = self.path_in(Path(self.state_dir))
        private_dir(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=".stack.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(self.to_json(), out, indent=2)
            out.write("\n")
        os.replace(tmp, path)
        return path

    def all_ports(self) -> list[int]:
        ports = [p for r in self.services.values() for p in r.ports()]
        for extra in (self.prometheus, self.ui):
            if extra is not None:
                ports += extra.ports()
        return sorted(set(ports))
