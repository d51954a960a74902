"""Settings of the capture service: ``RUNTRAIL_CAPTURE_*`` variables, overridden by ``-o``.

They live here, not in :mod:`runtrail.config`, so the capture service can grow options without
touching the settings every other service shares. ``runtrail run capture -o key=value`` wins
over the environment, which wins over the defaults; an unknown ``-o`` key is an error, not a
silently ignored typo.

Sink options that are left unset fall back to the sink URL's query string, then to the sink's
own defaults, so ``file:///dir?max_bytes=…`` keeps working.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field

from runtrail.config import ServiceSettings

#: Options that only the ``file://`` sink understands, and those only object stores do.
FILE_SINK_OPTIONS = ("max_bytes", "max_age_s", "max_open", "buffer_bytes")
OBJECT_SINK_OPTIONS = ("compression", "zstd_level", "batch_bytes")


def default_sink_url(state_dir: Path) -> str:
    """``file://<state_dir>/capture`` (absolute), the embedded default."""
    return (state_dir.expanduser().resolve() / "capture").as_uri()


class CaptureSettings(ServiceSettings, service="capture"):
    """What ``runtrail run capture`` and ``runtrail capture``/``replay`` read."""

    sink_url: str | None = Field(
        default=None,
        description="Where records go: file:///dir, s3://bucket/prefix (any obstore URL) or "
        "memory:// (default: file://<RUNTRAIL_STATE_DIR>/capture).",
    )
    idle_flush_s: float = Field(
        default=600.0,
        gt=0,
        description="A node untouched this long (consumer time) is flushed marked incomplete, "
        "so a crashed agent's open step holds neither memory nor offsets forever.",
    )
    max_bytes: int | None = Field(
        default=None, ge=1, description="file sink: roll a file at this size (bytes)."
    )
    max_age_s: float | None = Field(
        default=None, gt=0, description="file sink: roll a file at this age (seconds)."
    )
    max_open: int | None = Field(
        default=None, ge=1, description="file sink: most files appended to at once."
    )
    buffer_bytes: int | None = Field(
        default=None, ge=0, description="file sink: bytes buffered per file before a write."
    )
    compression: str | None = Field(
        default=None, description="object sink: 'none' or 'zstd' (objects named .jsonl.zst)."
    )
    zstd_level: int | None = Field(default=None, description="object sink: zstd level.")
    batch_bytes: int | None = Field(
        default=None, ge=1, description="object sink: upload a batch once it holds this much."
    )

    def resolved_sink_url(self, state_dir: Path) -> str:
        """The sink URL, defaulting to the file sink under the state folder."""
        return self.sink_url or default_sink_url(state_dir)

    def sink_options(self, url: str) -> dict[str, Any]:
        """The sink options that were set, checked against the kind of sink ``url`` names."""
        scheme = urlsplit(url).scheme.lower()
        applies: tuple[str, ...]
        if scheme == "memory":
            applies = ()
        elif scheme == "file":
            applies = FILE_SINK_OPTIONS
        else:
            applies = OBJECT_SINK_OPTIONS
        options: dict[str, Any] = {}
        for name in (*FILE_SINK_OPTIONS, *OBJECT_SINK_OPTIONS):
            value = getattr(self, name)
            if value is None:
                continue
            if name not in applies:
                raise ValueError(f"capture option {name} does not apply to a {scheme}:// sink")
            options[name] = value
        return options
