"""Where the demo finds the stack: which services run, their /metrics, groups and APIs.

On the local stack it is what ``runtrail dev up`` recorded in ``<state dir>/dev/stack.json``.
Elsewhere (docker-compose, a cluster) it comes from the environment:

* ``RUNTRAIL_DEMO_SERVICES`` — JSON ``{"capture": "http://capture:9410", …}``: each running
  service and the base URL of its /metrics;
* ``RUNTRAIL_DEMO_APIS`` — JSON ``{"resume-cache": "http://resume-cache:9421",
  "command-api": "http://command-api:9471"}``;
* ``RUNTRAIL_DEMO_TOKENS_FILE`` — JSON ``{tenant: token}`` for those APIs (else the
  resume-cache's own ``RUNTRAIL_RESUME_CACHE_TOKENS``).

Every section of the demo's report appears only for a service that is there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from runtrail.config import Settings
from runtrail_tools.devstack.service_settings import is_receiver
from runtrail_tools.devstack.state import StackState


class DemoSettings(BaseSettings):
    """The demo's own settings (``RUNTRAIL_DEMO_*``), for stacks ``dev up`` did not start."""

    model_config = SettingsConfigDict(env_prefix="RUNTRAIL_DEMO_", extra="ignore")

    services: dict[str, str] = Field(
        default_factory=dict, description="Running services: name -> base URL of /metrics."
    )
    apis: dict[str, str] = Field(
        default_factory=dict,
        description="Service APIs: name -> base URL (resume-cache, command-api).",
    )
    tokens_file: Path | None = Field(
        default=None, description="JSON {tenant: token} for the service APIs."
    )
    group_prefix: str = Field(default="runtrail", description="Consumer groups: PREFIX.NAME.")
    metrics_port: int | None = Field(
        default=None, description="Serve the demo agent's publisher metrics on this port."
    )
    metrics_host: str = Field(default="127.0.0.1", description="Bind address of those metrics.")
    timeout_s: float = Field(
        default=180.0, gt=0, description="Longest wait for the services to catch up."
    )


@dataclass(frozen=True)
class Endpoint:
    metrics_url: str
    #: None for a receiver (the command API, the outbox relay): it consumes no topic.
    group: str | None
    api_url: str | None = None


@dataclass
class Targets:
    """The running services as the demo sees them."""

    settings: Settings
    services: dict[str, Endpoint] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    agent_port: int | None = None
    agent_host: str = "127.0.0.1"
    timeout_s: float = 180.0

    def has(self, service: str) -> bool:
        return service in self.services

    def groups(self) -> dict[str, str]:
        """The consumer groups the demo waits for (receivers have none)."""
        return {name: e.group for name, e in self.services.items() if e.group is not None}


def _tokens(path: Path | None) -> dict[str, str]:
    if path is None or not path.exists():
        return {}
    loaded = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): str(v) for k, v in loaded.items()}


def from_stack(state: StackState, settings: Settings, demo: DemoSettings) -> Targets:
    """The services ``dev up`` recorded (the caller checks that they still run)."""
    settings = settings.model_copy(
        update={
            "bootstrap_servers": state.bootstrap_servers,
            "events_topic": state.events_topic,
            "dlq_topic": state.dlq_topic,
            "state_dir": Path(state.state_dir),
        }
    )
    services = {
        name: Endpoint(
            r.metrics_url,
            None if is_receiver(name) else r.group or f"{demo.group_prefix}.{name}",
            r.api_url,
        )
        for name, r in state.services.items()
    }
    return Targets(
        settings=settings,
        services=services,
        tokens=_tokens(Path(state.tokens_file) if state.tokens_file else None),
        agent_port=demo.metrics_port or state.agent_port,
        agent_host=demo.metrics_host,
        timeout_s=demo.timeout_s,
    )


def from_env(settings: Settings, demo: DemoSettings) -> Targets:
    """The services named by ``RUNTRAIL_DEMO_SERVICES`` / ``RUNTRAIL_DEMO_APIS``."""
    services = {
        name: Endpoint(
            url.rstrip("/") + "/metrics",
            None if is_receiver(name) else f"{demo.group_prefix}.{name}",
            demo.apis.get(name),
        )
        for name, url in demo.services.items()
    }
    tokens = _tokens(demo.tokens_file)
    if not tokens and "resume-cache" in services:
        from runtrail_services.resume_cache.settings import ResumeCacheSettings

        tokens = ResumeCacheSettings().tenant_tokens()
    return Targets(
        settings=settings,
        services=services,
        tokens=tokens,
        agent_port=demo.metrics_port,
        agent_host=demo.metrics_host,
        timeout_s=demo.timeout_s,
    )
