"""Least privilege: the Kafka principals of a runtrail deployment and exactly what each may do.

Why one table: ``runtrail kafka acls`` prints it for operators (as ``kafka-acls.sh``
commands), ``docs/OPERATIONS.md`` shows it, the secured local broker creates a credential per
principal, and the tests apply it (:func:`acl_bindings`) and run each service with only its
own. One principal per process kind, named ``runtrail-<kind>`` (the SCRAM user, or the CN of
the client certificate).

What the roles need, and why:

* every consumer service reads the events topic in its own group (``<prefix>.<service>``) and
  writes dead letters; the ones with an output topic write it;
* the agent (publisher, adapters) writes the events topic and nothing else: it may not read
  it, so after an outage it resends unconfirmed events without looking them up (a consumer
  skips an eventId it has seen);
* the outbox relay writes the events topic in transactions under its transactional ID, and
  reads it (read-committed, no group) at start to reconcile its outbox;
* the explorer reads the events topic in a throwaway group ``runtrail-ui-<random>``;
* the admin (topics, ACLs, offsets, replays) is a super user.

Idempotent producers need no ``IdempotentWrite`` on the cluster since Kafka 2.8 (``Write``
on a topic implies it); brokers before that need it granted too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtrail.config import Settings
from runtrail.kafka.topics import LEDGER_GROUP_PREFIX, otlp_traces_topic

#: Kafka's own names of the operations and resource types (kafka-acls.sh spells them so).
READ, WRITE, DESCRIBE = "Read", "Write", "Describe"
TOPIC, GROUP, TRANSACTIONAL_ID = "topic", "group", "transactional-id"
#: The consumer services and the output topic each writes (a Settings field), if any.
CONSUMER_OUTPUTS: dict[str, str | None] = {
    "audit": "audit_topic",
    "capture": None,
    "sessions": "sessions_topic",
    "resume-cache": "resume_cache_topic",
    "projector": None,
}
AGENT = "agent"
UI = "ui"
UI_GROUP_PREFIX = "runtrail-ui-"


@dataclass(frozen=True)
class Grant:
    """Operations allowed on one resource (a literal name, or every name with a prefix)."""

    resource: str
    name: str
    operations: tuple[str, ...]
    prefixed: bool = False


@dataclass(frozen=True)
class Role:
    """One principal and everything it may do."""

    kind: str
    runs: str
    grants: tuple[Grant, ...] = field(default_factory=tuple)

    @property
    def principal(self) -> str:
        return principal_name(self.kind)


def principal_name(kind: str) -> str:
    """The Kafka principal name of a process kind (``User:`` + this)."""
    return f"runtrail-{kind}"


def roles(
    settings: Settings,
    *,
    group_prefix: str = "runtrail",
    transactional_id: str = "runtrail-outbox-relay",
) -> list[Role]:
    """Every runtrail principal of a deployment with ``settings``' topic names."""
    events, dlq = settings.events_topic, settings.dlq_topic
    write = (WRITE, DESCRIBE)
    found: list[Role] = [
        Role(AGENT, "the publisher and the agent adapters", (Grant(TOPIC, events, write),)),
    ]
    for service, output in CONSUMER_OUTPUTS.items():
        grants = [
            Grant(TOPIC, events, (READ, DESCRIBE)),
            Grant(GROUP, f"{group_prefix}.{service}", (READ,)),
            Grant(TOPIC, dlq, write),
        ]
        if output is not None:
            grants.append(Grant(TOPIC, str(getattr(settings, output)), write))
        found.append(Role(service, f"runtrail run {service}", tuple(grants)))
    found += [
        Role(
            "outbox-relay",
            "runtrail run outbox-relay",
            (
                Grant(TOPIC, events, (READ, WRITE, DESCRIBE)),
                Grant(TRANSACTIONAL_ID, transactional_id, (WRITE, DESCRIBE)),
            ),
        ),
        Role(
            "otlp-ingest",
            "runtrail run otlp-ingest (mode map: events; mode forward: the raw topic)",
            (Grant(TOPIC, events, write), Grant(TOPIC, settings.otlp_raw_topic, write)),
        ),
        Role(
            "otlp-mapper",
            "runtrail run otlp-mapper",
            (
                Grant(TOPIC, settings.otlp_raw_topic, (READ, DESCRIBE)),
                Grant(GROUP, f"{group_prefix}.otlp-mapper", (READ,)),
                Grant(TOPIC, events, write),
                Grant(TOPIC, dlq, write),
                Grant(TOPIC, otlp_traces_topic(settings), (READ, WRITE, DESCRIBE)),
                Grant(GROUP, LEDGER_GROUP_PREFIX, (READ,), prefixed=True),
            ),
        ),
        Role(
            UI,
            "runtrail ui (the explorer's live view)",
            (
                Grant(TOPIC, events, (READ, DESCRIBE)),
                Grant(GROUP, UI_GROUP_PREFIX, (READ,), prefixed=True),
            ),
        ),
    ]
    return found


def principals(settings: Settings) -> list[str]:
    """The principal names of :func:`roles` (the admin is added by the broker's security)."""
    return [role.principal for role in roles(settings)]


def kafka_acls_commands(
    role_list: Iterable[Role], bootstrap_servers: str, command_config: str = "admin.properties"
) -> list[str]:
    """One ``kafka-acls.sh --add`` command per grant, for an operator to run as the admin."""
    lines = []
    for role in role_list:
        lines.append(f"# {role.principal}: {role.runs}")
        for grant in role.grants:
            resource = f"--{grant.resource} {grant.name}"
            pattern = " --resource-pattern-type prefixed" if grant.prefixed else ""
            ops = " ".join(f"--operation {op}" for op in grant.operations)
            lines.append(
                f"kafka-acls.sh --bootstrap-server {bootstrap_servers} --command-config "
                f"{command_config} --add --allow-principal User:{role.principal} {ops} "
                f"{resource}{pattern}"
            )
    return lines


def markdown_table(role_list: Sequence[Role]) -> str:
    """The table of ``docs/OPERATIONS.md``: principal, what runs as it, what it may do."""
    out = ["| principal | runs | allowed |", "| --- | --- | --- |"]
    for role in role_list:
        allowed = "; ".join(
            f"{'/'.join(g.operations)} {g.resource} `{g.name}{'*' if g.prefixed else ''}`"
            for g in role.grants
        )
        out.append(f"| `User:{role.principal}` | {role.runs} | {allowed} |")
    return "\n".join(out) + "\n"


def acl_bindings(role: Role) -> list[Any]:
    """The grants of ``role`` as AdminClient ``AclBinding``s (for ``create_acls``)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    types = {
        TOPIC: ResourceType.TOPIC,
        GROUP: ResourceType.GROUP,
        TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID,
    }
    bindings = []
    for grant in role.grants:
        pattern = ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL
        for op in grant.operations:
            bindings.append(
                AclBinding(
                    types[grant.resource],
                    grant.name,
                    pattern,
                    f"User:{role.principal}",
                    "*",
                    AclOperation[op.upper()],
                    AclPermissionType.ALLOW,
                )
            )
    return bindings


def apply(admin: Any, role_list: Iterable[Role], timeout: float = 30.0) -> int:
    """Create every grant of ``role_list`` (existing ones are left as they are); the count."""
    bindings = [b for role in role_list for b in acl_bindings(role)]
    if not bindings:
        return 0
    for binding, future in admin.create_acls(bindings, request_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
        except Exception as exc:
            raise RuntimeError(f"cannot create ACL {binding}: {exc}") from exc
    return len(bindings)
