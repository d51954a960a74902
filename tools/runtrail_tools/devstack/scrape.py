"""Reading a service process's ``/metrics`` (and ``/readyz``) for ``dev status`` and the demo.

The numbers shown are the processes' own: nothing is kept on the side, so ``status`` is right
even for a process someone restarted by hand on the same port.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from runtrail.config import Settings

Labels = Mapping[str, str]


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Scrape:
    """The samples of one scrape, with small helpers to add them up."""

    samples: list[Sample] = field(default_factory=list)

    def total(self, name: str, **labels: str) -> float | None:
        """Sum of the samples named ``name`` whose labels include ``labels``; None if none."""
        values = [
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        ]
        return sum(values) if values else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """``name``'s samples summed per value of ``label``."""
        out: dict[str, float] = {}
        for s in self.samples:
            if s.name == name and label in s.labels:
                out[s.labels[label]] = out.get(s.labels[label], 0.0) + s.value
        return out

    def names(self) -> set[str]:
        return {s.name for s in self.samples}


def parse(text: str) -> Scrape:
    samples = [
        Sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]
    return Scrape(samples)


def _request(url: str) -> urllib.request.Request:
    """A GET of ``url`` carrying ``RUNTRAIL_METRICS_TOKEN`` when one is set (the services
    started from the same environment require it)."""
    request = urllib.request.Request(url)
    token = Settings().metrics_token
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    return request


def fetch(url: str, timeout: float = 2.0) -> Scrape | None:
    """The scrape of ``url``, or None when nothing answers there."""
    try:
        with urllib.request.urlopen(_request(url), timeout=timeout) as response:
            return parse(response.read().decode("utf-8"))
    except (OSError, urllib.error.URLError, ValueError):
        return None


def ready(port: int, timeout: float = 2.0) -> bool:
    """Whether ``/readyz`` on ``127.0.0.1:port`` answers 200 (joined its group, assigned)."""
    try:
        url = f"http://127.0.0.1:{port}/readyz"
        with urllib.request.urlopen(_request(url), timeout=timeout) as r:
            return int(r.status) == 200
    except (OSError, urllib.error.URLError):
        return False
