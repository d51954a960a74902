"""Prometheus for the local stack: the scrape config rendered from the stack's port table.

``deploy/prometheus/prometheus.yml`` is this rendering for the default ports (a test keeps the
two equal), so what a developer's Prometheus scrapes is what docker-compose's and the tests' do.
The output is JSON, which is YAML too: no YAML library needed at run time.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtrail.files import CHECKOUT_ROOT, open_private, private_dir

SERVICES_JOB = "runtrail-services"
AGENTS_JOB = "runtrail-agents"


def deploy_dir() -> Path:
    """``deploy/`` of the source checkout (the stack runs from one, like the local broker)."""
    return CHECKOUT_ROOT / "deploy"


def alert_rules_file() -> Path | None:
    path = deploy_dir() / "prometheus" / "alerts.yml"
    return path if path.is_file() else None


def find_prometheus() -> str | None:
    return shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )


def scrape_config(
    services: Mapping[str, str],
    agents: Mapping[str, str],
    *,
    interval: str = "15s",
    rule_files: list[str] | None = None,
    token: str | None = None,
) -> dict[str, Any]:
    """The config: ``services`` and ``agents`` map a name to its ``host:port``; ``token`` is
    the services' metrics token (``RUNTRAIL_METRICS_TOKEN``), sent as a bearer token."""
    services_job: dict[str, Any] = {
        "job_name": SERVICES_JOB,
        "metrics_path": "/metrics",
        "static_configs": [
            {"targets": [target], "labels": {"runtrail_service": name}}
            for name, target in services.items()
        ],
    }
    if token:
        services_job["authorization"] = {"type": "Bearer", "credentials": token}
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": list(rule_files or []),
        "scrape_configs": [
            services_job,
            {
                "job_name": AGENTS_JOB,
                "metrics_path": "/metrics",
                "static_configs": [
                    {"targets": [target], "labels": {"runtrail_agent": name}}
                    for name, target in agents.items()
                ],
            },
        ],
    }


def write_config(path: Path, config: Mapping[str, Any]) -> Path:
    """Write the config 0600 in a 0700 folder: it may hold the metrics token."""
    private_dir(path.parent)
    with open_private(path, "w", encoding="utf-8") as out:
        out.write(json.dumps(config, indent=2) + "\n")
    return path


def command(binary: str, config: Path, data_dir: Path, port: int) -> list[str]:
    """Prometheus on loopback only, its TSDB under the stack's state folder."""
    return [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=2d",
        "--log.level=warn",
    ]
