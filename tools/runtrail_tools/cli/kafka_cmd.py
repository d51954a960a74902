"""``runtrail kafka up|down|status|fetch|acls``.

The local broker lives in ``<state dir>/kafka`` so that every command, from any process,
finds the same broker through its pid and state files.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from runtrail.config import Settings
from runtrail_tools.cli.common import add_common_flags, settings_from_args
from runtrail_tools.kafka.acls import principals
from runtrail_tools.kafka.broker import BrokerError, LocalBroker
from runtrail_tools.kafka.cluster import LocalCluster, LocalKafka, local_kafka
from runtrail_tools.kafka.security import (
    ADMIN_PRINCIPAL,
    MODES,
    BrokerSecurity,
    recorded_mode,
)

#: Exit status of ``runtrail kafka status`` when no broker runs.
NOT_RUNNING = 3


def broker_for(settings: Settings, args: argparse.Namespace | None = None) -> LocalKafka:
    """The local broker or cluster of ``settings.state_dir``, on the ports of the flags or
    settings, of ``--brokers`` nodes (else whatever the folder holds); a single broker
    secured as ``--security`` says or as its home was first set up."""
    broker = local_kafka(
        settings,
        getattr(args, "brokers", None),
        port=getattr(args, "port", None),
        controller_port=getattr(args, "controller_port", None),
    )
    mode = getattr(args, "security", None)
    if isinstance(broker, LocalCluster):
        if mode not in (None, "none"):
            raise BrokerError(
                "--security is for a single local broker; a local cluster runs PLAINTEXT "
                "(secure a real cluster as docs/OPERATIONS.md says)"
            )
        return broker
    mode = mode or recorded_mode(broker.home)
    if mode not in (None, "none"):
        broker.security = BrokerSecurity(broker.home, mode, principals(settings))
    return broker


def _print_security(broker: LocalKafka) -> None:
    if not isinstance(broker, LocalBroker) or broker.security is None:
        return
    security = broker.security
    folder = security.write_client_files(broker.bootstrap_servers)
    admin = security.client(ADMIN_PRINCIPAL).environment(broker.bootstrap_servers)
    print(f"  security: {security.mode} ({security.listener}), ACLs enforced")
    print(f"  client settings per principal: {folder}/<principal>.env")
    print(f"  as the admin ({ADMIN_PRINCIPAL}, a super user):")
    for key, value in admin.items():
        print(f"  export {key}='{value}'")
    print("  then grant each service its ACLs: runtrail kafka acls --apply")


def _pids(broker: LocalKafka) -> str:
    if isinstance(broker, LocalCluster):
        return "pids " + ", ".join(str(pid) if pid else "-" for pid in broker.pids())
    return f"pid {broker.pid}"


def _up(args: argparse.Namespace) -> int:
    try:
        broker = broker_for(settings_from_args(args), args)
    except BrokerError as exc:
        print(f"runtrail: {exc}", file=sys.stderr)
        return 1
    recorded = recorded_mode(broker.home)
    if args.security == "none" and recorded is not None:
        print(
            f"runtrail: the broker in {broker.home} was set up for --security {recorded}; "
            f"stop it and remove {broker.home} to run it without security",
            file=sys.stderr,
        )
        return 1
    if isinstance(broker, LocalBroker) and broker.is_running():
        state = broker.read_state()
        address = state.bootstrap_servers if state else broker.bootstrap_servers
        print(f"kafka already running at {address} (pid {broker.pid})")
        return 0
    try:
        broker.start(timeout=args.timeout)
    except BrokerError as exc:
        print(f"runtrail: kafka did not start: {exc}", file=sys.stderr)
        return 1
    print(f"kafka running at {broker.bootstrap_servers} ({_pids(broker)})")
    print(f"  logs: {broker.server_log}")
    if not isinstance(broker, LocalBroker) or broker.security is None:
        print(f"  export RUNTRAIL_BOOTSTRAP_SERVERS={broker.bootstrap_servers}")
    _print_security(broker)
    return 0


def _down(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    try:
        broker = broker_for(settings)
    except BrokerError as exc:
        print(f"runtrail: {exc}", file=sys.stderr)
        return 1
    if broker.pid is None:
        broker.stop()  # clears stale pid/state files
        print("kafka not running")
        return 0
    pids = _pids(broker)
    try:
        broker.stop(timeout=args.timeout)
    except BrokerError as exc:
        print(f"runtrail: {exc}", file=sys.stderr)
        return 1
    print(f"kafka stopped ({pids})")
    return 0


def _status(args: argparse.Namespace) -> int:
    try:
        broker = broker_for(settings_from_args(args))
    except BrokerError as exc:
        print(f"runtrail: {exc}", file=sys.stderr)
        return 1
    if broker.pid is None:
        print(f"kafka not running (home {broker.home})")
        return NOT_RUNNING
    state = broker.read_state()
    address = state.bootstrap_servers if state else broker.bootstrap_servers
    print(f"kafka running at {address} ({_pids(broker)}, home {broker.home})")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    broker = broker_for(settings_from_args(args))
    try:
        libs = broker.ensure_jars()
    except BrokerError as exc:
        print(f"runtrail: {exc}", file=sys.stderr)
        return 1
    print(f"kafka broker jars in {libs}")
    if args.class_archive:
        from runtrail_tools.kafka.broker import prime_class_archive

        try:
            archive = prime_class_archive(settings_from_args(args), libs)
        except BrokerError as exc:
            print(f"runtrail: no class-data archive: {exc}", file=sys.stderr)
            return 1
        if archive is None:
            print("no class-data archive written (the JVM options choose their own sharing)")
        else:
            print(f"class-data archive in {archive}")
    return 0


def _acls(args: argparse.Namespace) -> int:
    from runtrail_tools.kafka import acls

    settings = settings_from_args(args)
    role_list = acls.roles(
        settings, group_prefix=args.group_prefix, transactional_id=args.transactional_id
    )
    if args.markdown:
        print(acls.markdown_table(role_list), end="")
        return 0
    if not args.apply:
        print("\n".join(acls.kafka_acls_commands(role_list, settings.bootstrap_servers)))
        return 0
    from runtrail.kafka.admin import admin_client
    from runtrail.kafka.auth import AuthWatch, wait_connected
    from runtrail.kafka.client_log import quiet_unless_verbose

    config = settings.kafka_config(logger=quiet_unless_verbose(args.verbose))
    config["error_cb"] = watch = AuthWatch(config)
    admin = admin_client(config)
    wait_connected(admin, watch, timeout=args.timeout)
    try:
        count = acls.apply(admin, role_list, timeout=args.timeout)
    except RuntimeError as exc:
        print(f"runtrail: on {settings.bootstrap_servers}: {exc}", file=sys.stderr)
        return 1
    print(f"{count} ACLs in place for {len(role_list)} principals on {settings.bootstrap_servers}")
    return 0


def register(subparsers: Any) -> None:
    """Add the ``kafka`` command group."""
    kafka = subparsers.add_parser(
        "kafka", help="run a local Kafka broker, or a cluster of several (KRaft)"
    )
    kafka_sub = kafka.add_subparsers(dest="kafka_command", metavar="ACTION", required=True)

    up = kafka_sub.add_parser("up", help="start the local broker (fetching its jars once)")
    add_common_flags(up)
    # --kafka-port is the one name (dev up and demo take it too); --port stays a hidden alias
    up.add_argument(
        "--kafka-port",
        dest="port",
        type=int,
        metavar="N",
        help="broker port (RUNTRAIL_KAFKA_PORT, default 9092)",
    )
    up.add_argument("--port", dest="port", type=int, help=argparse.SUPPRESS)
    up.add_argument(
        "--kafka-controller-port",
        dest="controller_port",
        type=int,
        metavar="N",
        help="controller port (RUNTRAIL_KAFKA_CONTROLLER_PORT, default 9093)",
    )
    up.add_argument("--controller-port", dest="controller_port", type=int, help=argparse.SUPPRESS)
    up.add_argument(
        "--brokers",
        type=int,
        metavar="N",
        help="nodes of a local cluster (default 1; each next node two ports higher)",
    )
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for the broker")
    up.add_argument(
        "--security",
        choices=("none", *MODES),
        help="scram: SASL_SSL with SCRAM-SHA-512; mtls: TLS with required client "
        "certificates; both with ACLs enforced and credentials generated into the state "
        "folder (default: as the broker was first set up, else none)",
    )
    up.set_defaults(func=_up)

    down = kafka_sub.add_parser("down", help="stop the local broker")
    add_common_flags(down)
    down.add_argument("--timeout", type=float, default=20.0, help="seconds before SIGKILL")
    down.set_defaults(func=_down)

    status = kafka_sub.add_parser(
        "status", help=f"is the local broker running? (exit 0 if so, {NOT_RUNNING} if not)"
    )
    add_common_flags(status)
    status.set_defaults(func=_status)

    fetch = kafka_sub.add_parser(
        "fetch", help="fetch the broker jars with Maven into the cache (or check KAFKA_HOME)"
    )
    add_common_flags(fetch)
    fetch.add_argument(
        "--class-archive",
        action="store_true",
        help="also start and stop a broker once, so that the JVM writes the class-data archive "
        "every later broker start maps (about half the CPU of a start; otherwise the first "
        "broker stopped cleanly writes it)",
    )
    fetch.set_defaults(func=_fetch)

    acl = kafka_sub.add_parser(
        "acls", help="the ACLs each runtrail principal needs (kafka-acls.sh commands)"
    )
    add_common_flags(acl)
    acl.add_argument("--group-prefix", default="runtrail", help="consumer groups' prefix")
    acl.add_argument(
        "--transactional-id",
        default="runtrail-outbox-relay",
        help="the outbox relay's transactional.id (RUNTRAIL_OUTBOX_RELAY_TRANSACTIONAL_ID)",
    )
    what = acl.add_mutually_exclusive_group()
    what.add_argument("--markdown", action="store_true", help="print them as a table")
    what.add_argument(
        "--apply", action="store_true", help="create them on the cluster (as a super user)"
    )
    acl.add_argument("--timeout", type=float, default=30.0, help="seconds per admin call")
    acl.set_defaults(func=_acls)
