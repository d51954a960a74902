"""Helpers for the resume-cache tests: topics, a service child process, an HTTP probe."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtrail.config import Settings
from runtrail.persistence.urls import sqlite_url
from runtrail_tools.kafka.ports import free_ports
from tests.support import ServiceProcess, create_topic, unique_topic, wait_for

TOKENS = {"acme": "tok-acme", "globex": "tok-globex"}
PARTITIONS = 3


def make_topics(bootstrap: str, prefix: str = "rc") -> tuple[str, str]:
    """A fresh events topic (+ its DLQ) and a compacted cache topic."""
    events = create_topic(bootstrap, unique_topic(prefix), partitions=PARTITIONS)
    create_topic(bootstrap, f"{events}.dlq", partitions=PARTITIONS)
    cache = create_topic(
        bootstrap, f"{events}.cache", partitions=PARTITIONS, **{"cleanup.policy": "compact"}
    )
    return events, cache


def get(url: str, token: str | None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


@dataclass
class CacheService:
    """``runtrail run resume-cache`` as a child process, on its own topics and store."""

    bootstrap: str
    events_topic: str
    cache_topic: str
    home: Path
    store_url: str = ""
    port: int = 0
    group: str = field(default_factory=lambda: f"rc-{uuid.uuid4().hex[:8]}")
    proc: ServiceProcess | None = None

    def __post_init__(self) -> None:
        self.store_url = self.store_url or sqlite_url(self.home / "resume-cache.db")
        self.port = self.port or free_ports(1)[0]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def settings(self, tenant: str = "acme") -> Settings:
        return Settings(
            bootstrap_servers=self.bootstrap,
            events_topic=self.events_topic,
            resume_cache_topic=self.cache_topic,
            tenant=tenant,
            spool_dir=self.home / "spool",
        )

    def env(self) -> dict[str, str]:
        return {
            "RUNTRAIL_RESUME_CACHE_TOPIC": self.cache_topic,
            "RUNTRAIL_STATE_DIR": str(self.home / "state"),
            "RUNTRAIL_BATCH_TIMEOUT_MS": "50",
        }

    def start(self) -> CacheService:
        self.proc = ServiceProcess(
            "resume-cache",
            self.bootstrap,
            self.events_topic,
            group=self.group,
            options={
                "store_url": self.store_url,
                "http_port": str(self.port),
                "tokens": json.dumps(TOKENS),
                "wait_timeout_ms": "30000",
            },
            env=self.env(),
            log_path=self.home / "service.log",
        )
        wait_for(self.ready, 60, what="the resume-cache API")
        return self

    def ready(self) -> bool:
        assert self.proc is not None
        if not self.proc.alive():
            log = (self.home / "service.log").read_text()[-3000:]
            raise AssertionError(f"the resume-cache service exited:\n{log}")
        try:
            status, _ = get(f"{self.url}/v1/tenants/acme/runs/probe?wait_ms=0", TOKENS["acme"])
        except OSError:
            return False
        return status == 200

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.close()
