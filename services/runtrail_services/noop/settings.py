"""Settings of the noop service: ``RUNTRAIL_NOOP_*`` variables, overridden by ``-o``.

A class of its own, like every service's, so that ``runtrail run noop --help`` lists its one
option and a mistyped ``-o`` key is refused rather than ignored.
"""

from __future__ import annotations

from pydantic import Field

from runtrail.config import ServiceSettings


class NoopSettings(ServiceSettings, service="noop"):
    """What ``runtrail run noop`` reads."""

    output: str | None = Field(
        default=None,
        description="A file to append one line per event to (eventId partition offset), "
        "fsynced at each flush: a durable record of what was processed (none by default).",
    )
