"""Every runtrail setting, in one pydantic-settings model.

Values come from, in order of precedence: CLI flags (passed as init kwargs), ``RUNTRAIL_*``
environment variables, then the defaults below. Kafka client options (SASL, TLS, timeouts…)
pass through untouched via ``RUNTRAIL_KAFKA_OPTIONS`` (a JSON object) or ``-X key=value``;
secret ones (a SASL password, a key's password) are read from files named in
``RUNTRAIL_KAFKA_OPTION_FILES``, so they sit in no environment, argv or log.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from runtrail.kafka.client_log import client_logger

log = logging.getLogger(__name__)


class Settings(BaseSettings):
    """Settings shared by the CLI, the publisher and every service."""

    model_config = SettingsConfigDict(env_prefix="RUNTRAIL_", extra="ignore")

    # --- Kafka connection -------------------------------------------------------------------
    bootstrap_servers: str = Field(
        default="127.0.0.1:9092", description="Kafka bootstrap servers (host:port,…)."
    )
    kafka_options: dict[str, str] = Field(
        default_factory=dict,
        description="Extra librdkafka options for every client (security.protocol, sasl.*, ssl.*…).",
    )
    kafka_option_files: dict[str, Path] = Field(
        default_factory=dict,
        description="librdkafka options whose value is a file's text (its trailing newline "
        "dropped), option -> path: the *_FILE form of secrets such as sasl.password or "
        "ssl.key.password, e.g. from a mounted Secret. Read whenever a client is made, so a "
        "changed secret is used from the next start. An option may not be in both.",
    )
    extra_schema_dirs: list[Path] = Field(
        default_factory=list,
        description="Folders of extra writer schemas (.avsc) to decode events this code has no "
        "model for; such events are dead-lettered as unknown type/version.",
    )

    # --- Topics -----------------------------------------------------------------------------
    events_topic: str = Field(
        default="runtrail.events", description="Events topic, keyed by run ID."
    )
    dlq_topic: str = Field(default="runtrail.events.dlq", description="Dead-letter topic.")
    resume_cache_topic: str = Field(
        default="runtrail.resume-cache", description="Compacted cache topic."
    )
    sessions_topic: str = Field(
        default="runtrail.sessions", description="Compacted sessions topic."
    )
    audit_topic: str = Field(default="runtrail.audit", description="Sealed audit links topic.")
    otlp_raw_topic: str = Field(
        default="runtrail.otlp-raw",
        description="Raw OTLP spans and log records the receivers forward to the mapper, keyed "
        "by tenant and trace ID.",
    )
    otlp_drops_store_url: str | None = Field(
        default=None,
        description="Where OTLP ingest counts what it did not record, per run and reason "
        "(receivers and mappers write, `runtrail otlp drops` and the explorer read): "
        "sqlite:///path.db or postgresql://… (default: sqlite:///<state dir>/otlp-drops.db).",
    )
    partitions: int = Field(
        default=6, ge=1, description="Partitions of the events topic when created."
    )
    replication_factor: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Replication factor of the topics (default: the cluster's, that of runtrail's "
            "existing topics, else the brokers' default.replication.factor)."
        ),
    )
    events_retention_ms: int = Field(
        default=-1, description="retention.ms of the events topic (-1 keeps everything)."
    )

    # --- Identity ---------------------------------------------------------------------------
    tenant: str = Field(default="default", description="Tenant ID the publisher stamps on events.")

    # --- Consumer runtime -------------------------------------------------------------------
    group: str | None = Field(
        default=None, description="Consumer group (default: runtrail.<service>)."
    )
    batch_size: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Most messages taken per consume call (default: the service's own, 250 for most, "
            "2000 for sessions); the service processes them 250 at a time."
        ),
    )
    batch_timeout_ms: int = Field(default=200, ge=1, description="Longest wait for a batch.")
    commit_interval_ms: int = Field(
        default=1000, ge=0, description="Flush outputs and commit offsets at most this often."
    )
    shutdown_timeout_s: float = Field(
        default=15.0, gt=0, description="Bound on flush + commit at SIGTERM/SIGINT."
    )
    commit_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="Longest wait for an offset commit's result; no result in time is "
        "retried (not ready, nothing taken as committed). Capped at shutdown_timeout_s.",
    )
    group_stuck_s: float = Field(
        default=120.0,
        gt=0,
        description="How long a service's consumer group may go without its coordinator "
        "before /readyz names it and, holding no partitions then, the service replaces its "
        "Kafka client (a client that did not rejoin after an outage). A client that knows no "
        "broker is replaced after 10 s.",
    )
    assignment_strategy: str = Field(
        default="range",
        description="partition.assignment.strategy: eager 'range', or 'cooperative-sticky' "
        "(incremental: only the partitions that change owner are revoked).",
    )
    auto_offset_reset: str = Field(
        default="earliest",
        description="Where a new group starts a partition it has no committed offset for "
        "(earliest or latest). The projector and the audit start where their store says, or "
        "at the beginning: a projection or a chain is never started midway; the resume cache "
        "uses it for partitions its store holds no position of.",
    )
    dlq_max_consecutive: int = Field(
        default=100,
        ge=0,
        description="Dead-letter limit: at most this many handler-error dead letters in a row "
        "per partition; the next handler error stops consuming that partition (paused, not "
        "ready, nothing committed from the run's first event; a restart resumes there). "
        "0: no bound.",
    )
    dlq_max_ratio: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Dead-letter limit: at most this share of handler errors among the last "
        "dlq_ratio_window offsets of a partition; one more stops it like dlq_max_consecutive. "
        "0 (or 1): no bound.",
    )
    dlq_ratio_window: int = Field(
        default=1000,
        ge=0,
        description="Offsets per partition over which dlq_max_ratio is counted. 0: no bound.",
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="Bind address of /metrics, /healthz, /readyz."
    )
    metrics_port: int | None = Field(
        default=None,
        description="Port of the HTTP endpoint (default: the service's own; 0 = any free).",
    )
    metrics_token: str | None = Field(
        default=None,
        description="Bearer token /metrics (and /healthz, /readyz) require; set it whenever "
        "metrics_host is not loopback. None: open.",
    )
    metrics_health_open: bool = Field(
        default=False,
        description="Serve /healthz and /readyz without the metrics token (for Kubernetes "
        "probes, which cannot read a Secret; they say only whether the service is live and ready).",
    )

    # --- Publisher --------------------------------------------------------------------------
    spool_dir: Path = Field(
        default=Path(".runtrail/spool"),
        description="The write-ahead spool: every accepted event is kept here until the "
        "broker acknowledged it, and sent from here after an outage or a crash.",
    )
    delivery_timeout_ms: int = Field(
        default=30000,
        ge=1000,
        description="An event unacknowledged this long (no broker progress) sends the "
        "publisher to its spool until the broker is back.",
    )
    spool_commit_ms: int = Field(
        default=10,
        ge=1,
        le=10_000,
        description="Group commit of the write-ahead spool: accepted events are written and "
        "fsynced this often. An agent killed before the group commit that holds an event is "
        "complete (this interval plus one write and fsync) may lose it; anything older "
        "survives.",
    )
    publish_max_block_ms: int = Field(
        default=1000,
        ge=0,
        description="How long publish may wait for room in a full local producer queue "
        "before it spools the event instead.",
    )
    compression: str = Field(default="zstd", description="Producer compression.type.")
    linger_ms: int = Field(default=5, ge=0, description="Producer linger.ms (batching).")

    # --- Protected content (runtrail.privacy; docs/PRIVACY.md) ---------------------------------
    content_store_url: str | None = Field(
        default=None,
        description="Where protected content is kept, sealed (file:///dir, s3://bucket/prefix?…, "
        "postgresql://…; ?name= names it in references). Unset: every field travels inline.",
    )
    key_store_url: str | None = Field(
        default=None,
        description="Data keys and tenant keys (file:///dir, 0600 files). Default: "
        "file://<state_dir>/keys.",
    )
    privacy_policy: dict[str, Any] = Field(
        default_factory=dict,
        description="Which field classes go by reference, per tenant, whose key seals them and "
        "the claim-check size (a JSON object; see docs/PRIVACY.md).",
    )
    retention_policy: dict[str, Any] = Field(
        default_factory=dict,
        description="How long each store keeps its data, applied by the service that owns it: "
        '{"capture": {"olderThanDays": 30}, "sessions": …, "resumeCache": …, "content": …, '
        '"checkpoints": {"keepLatest": 5}} (a JSON object; see docs/PRIVACY.md). Empty: '
        "nothing expires.",
    )
    prune_log_url: str | None = Field(
        default=None,
        description="Where retention records what it deleted and when (the services and "
        "`runtrail prune` write, the explorer reads): sqlite:///path.db or postgresql://… "
        "(default: sqlite:///<state dir>/prunes.db).",
    )
    retention_interval_s: float = Field(
        default=3600.0,
        gt=0,
        description="How often a service applies its store's retention policy (seconds).",
    )

    # --- Limits (enforced at publish and at consume; see runtrail.events.limits) --------------
    max_event_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        description="Largest encoded event; larger ones are rejected at publish and "
        "dead-lettered (too-large) at consume. Topics and clients are sized to it.",
    )
    max_json_depth: int = Field(
        default=128,
        ge=2,
        le=512,
        description="Deepest nesting of objects/arrays in an event's JSON form; deeper ones "
        "are rejected at publish and dead-lettered (too-deep) at consume.",
    )

    native: Literal["auto", "off", "required"] = Field(
        default="auto",
        description="The compiled consume path (runtrail_native, built from "
        "shared/runtrail_native): auto uses it when installed, off never, required refuses "
        "to start without it. Read when runtrail.events is imported; each service logs which "
        "path it runs.",
    )

    # --- Node assembly (capture, resume-cache; see runtrail.nodes.order) ----------------------
    reorder_window: int = Field(
        default=1000,
        ge=0,
        description="A run's missing sequence is waited for while fewer than this many later "
        "events are read from its partition; then its open nodes are marked incomplete.",
    )
    reorder_wait_s: float = Field(
        default=5.0,
        gt=0,
        description="Longest consumer time a missing sequence is waited for on a quiet "
        "partition (and a run picked up mid-way waits before it starts).",
    )

    # --- Local broker -----------------------------------------------------------------------
    state_dir: Path = Field(
        default=Path(".runtrail"),
        description="Local state: broker data, pids, logs, embedded stores.",
    )
    kafka_port: int = Field(default=9092, description="Port of the local broker.")
    kafka_controller_port: int = Field(
        default=9093, description="Controller port of the local broker."
    )
    kafka_cache_dir: Path = Field(
        default=Path.home() / ".cache" / "runtrail" / "kafka",
        description="Where Maven-fetched broker jars are cached.",
    )
    kafka_heap: str = Field(default="512m", description="-Xmx of the local broker JVM.")
    kafka_jvm_options: str = Field(
        default="",
        description="Extra JVM options of the local broker, space-separated (the suite uses "
        "-XX:TieredStopAtLevel=1: a broker that starts on about half the CPU).",
    )

    @field_validator("kafka_options", "kafka_option_files", mode="before")
    @classmethod
    def _options_from_pairs(cls, value: Any) -> Any:
        """Accept ``key=value,key=value`` as well as a JSON object."""
        if isinstance(value, str) and not value.lstrip().startswith("{"):
            pairs = [p for p in value.split(",") if p.strip()]
            return dict(p.split("=", 1) for p in pairs)
        return value

    def resolved_prune_log_url(self) -> str:
        """The prune log: the one setting every writer and reader of it resolves."""
        from runtrail.persistence.urls import sqlite_url

        return self.prune_log_url or sqlite_url(self.state_dir.expanduser().resolve() / "prunes.db")

    def resolved_otlp_drops_url(self) -> str:
        """The OTLP drops store: the one setting every writer and reader of it resolves."""
        from runtrail.persistence.urls import sqlite_url

        return self.otlp_drops_store_url or sqlite_url(
            self.state_dir.expanduser().resolve() / "otlp-drops.db"
        )

    def kafka_config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka config for a client: bootstrap servers + passthrough options + overrides.

        It holds a ``logger`` (unless the caller passes one): librdkafka's log lines then go
        through ``logging``, rate-limited, never raw to stderr; and an ``error_cb`` (unless the
        caller passes one) that logs a refusal of the credentials once, naming the broker and
        the mechanism (:mod:`runtrail.kafka.auth`). Those objects are no librdkafka options:
        the config is for a client's constructor, never to be serialised (what is,
        ``kafka_options``, stays plain strings). Options from ``kafka_option_files`` are read
        here, at each call, so the secret is in memory only while a client is made.
        """
        from runtrail.kafka.auth import error_reporter

        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        both = sorted(set(self.kafka_options) & set(self.kafka_option_files))
        if both:  # checked here, not by validation, whose errors would echo the options
            raise KafkaOptionFileError(
                f"kafka option(s) {', '.join(both)} given both in kafka_options and "
                "kafka_option_files: give each one way"
            )
        config.update(self.kafka_options)
        config.update(read_option_files(self.kafka_option_files))
        config.update(overrides)
        config.setdefault("logger", client_logger())
        config.setdefault("error_cb", error_reporter(config))
        return config


class KafkaOptionFileError(ValueError):
    """A file named in ``kafka_option_files`` cannot be read (the message names the option
    and the path, never the content)."""


def read_option_files(files: Mapping[str, Path] | Mapping[str, str]) -> dict[str, str]:
    """Option -> the text of its file, without the trailing newline a Secret file may end in."""
    values: dict[str, str] = {}
    for option, path in files.items():
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise KafkaOptionFileError(
                f"cannot read kafka option {option} from {path}: {reason}"
            ) from None
        values[option] = text.rstrip("\r\n")
    return values


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment, with CLI overrides (None values are ignored)."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def env_prefix(service: str) -> str:
    """Where a service's own variables start: ``command-api`` -> ``RUNTRAIL_COMMAND_API_``."""
    return f"RUNTRAIL_{service.upper().replace('-', '_')}_"


class ServiceSettings(BaseSettings):
    """Base of a service's own settings (``RUNTRAIL_<SERVICE>_*``, overridden by ``-o``).

    Each service keeps its options in a class of its own, so it can grow them without touching
    the settings every command shares; ``runtrail settings`` lists them all.
    """

    #: The service's name, used in error messages; its variables are ``env_prefix(name)``.
    service_name: ClassVar[str] = "service"
    #: Options that took another name: old name -> new name. Given under the old name (``-o``
    #: or the environment) they are an error naming the new one, never silently ignored.
    renamed: ClassVar[Mapping[str, str]] = {}
    #: Options that took another name but are still read under the old one: old name -> new
    #: name. A deployment that sets the old name keeps working, with a warning naming the new
    #: one; the new name wins when both are given.
    deprecated: ClassVar[Mapping[str, str]] = {}

    def __init_subclass__(cls, service: str | None = None, **kwargs: Any) -> None:
        """``class XSettings(ServiceSettings, service="x-y")`` names the service once: its
        name and its ``RUNTRAIL_X_Y_`` variables cannot disagree."""
        super().__init_subclass__(**kwargs)
        if service is not None:
            cls.service_name = service
            prefix = env_prefix(service)
            cls.model_config = {**cls.model_config, "env_prefix": prefix, "extra": "ignore"}

    @classmethod
    def load(cls, options: Mapping[str, Any] | None = None) -> Self:
        """The environment plus ``-o`` options (None values ignored); an unknown key is an
        error, never a silently ignored typo."""
        given = {k: v for k, v in (options or {}).items() if v is not None}
        prefix = str(cls.model_config.get("env_prefix", ""))
        for old, new in cls.renamed.items():
            if old in given or f"{prefix}{old}".upper() in {k.upper() for k in os.environ}:
                raise ValueError(
                    f"{cls.service_name} option {old} ({prefix}{old.upper()}) is now {new} "
                    f"({prefix}{new.upper()}): rename it"
                )
        for old, new in cls.deprecated.items():
            given = _read_deprecated(cls.service_name, prefix, old, new, given)
        unknown = sorted(set(given) - set(cls.model_fields))
        if unknown:
            known = ", ".join(cls.model_fields)
            raise ValueError(
                f"unknown {cls.service_name} option(s) {', '.join(unknown)} (known: {known})"
            )
        return cls.model_validate(given)


def _read_deprecated(
    service: str, prefix: str, old: str, new: str, given: dict[str, Any]
) -> dict[str, Any]:
    """``given`` with option ``old`` (``-o`` or the environment) moved to ``new``, warned about."""
    environment = {k.upper(): v for k, v in os.environ.items()}
    old_env, new_env = f"{prefix}{old}".upper(), f"{prefix}{new}".upper()
    value = given.pop(old, environment.get(old_env))
    if value is None:
        return given
    log.warning(
        "%s option %s (%s) is deprecated: read as %s (%s); rename it",
        service,
        old,
        old_env,
        new,
        new_env,
    )
    if new not in given and new_env not in environment:
        given[new] = value
    return given


def tokens_from_json(value: Any) -> Any:
    """A ``tokens`` setting given as text (the environment, ``-o``): its JSON object."""
    if isinstance(value, str):
        return json.loads(value) if value.strip() else {}
    return value


def merged_tokens(tokens: Mapping[str, str], tokens_file: Path | None) -> dict[str, str]:
    """``tokens`` with the JSON object tenant → token of ``tokens_file`` over them."""
    merged = dict(tokens)
    if tokens_file is not None:
        loaded = json.loads(tokens_file.read_text(encoding="utf-8"))
        if not isinstance(loaded, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in loaded.items()
        ):
            raise ValueError(f"{tokens_file}: expected a JSON object tenant -> token")
        merged.update(loaded)
    return merged


class TenantTokenSettings(ServiceSettings):
    """Base of the settings of a service that answers tenants by bearer token (resume-cache's
    lookups, the OTLP receiver, the command API): ``tokens``, a JSON object tenant → token, and
    ``tokens_file``, a JSON file of the same shape (the file wins per tenant)."""

    tokens: dict[str, str] = Field(
        default_factory=dict, description="Bearer token per tenant, as a JSON object."
    )
    tokens_file: Path | None = Field(
        default=None, description="JSON file {tenant: token}; merged over `tokens`."
    )

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens_from_json(cls, value: Any) -> Any:
        return tokens_from_json(value)

    def tenant_tokens(self) -> dict[str, str]:
        """Tenant → token, from ``tokens`` and ``tokens_file``; an empty token is an error."""
        tokens = merged_tokens(self.tokens, self.tokens_file)
        empty = [t for t, tok in tokens.items() if not tok]
        if empty:
            raise ValueError(f"empty token for tenant(s) {', '.join(sorted(empty))}")
        return tokens
