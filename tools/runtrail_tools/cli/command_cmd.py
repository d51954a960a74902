"""``runtrail command …``: operators' commands to a run through the command API, and
``runtrail resume RUN``: the resume protocol on a command store.

Commands go to ``--url`` (``RUNTRAIL_COMMAND_URL``) with ``--token``
(``RUNTRAIL_COMMAND_TOKEN``); without ``--expected-version`` the run's current version is
read first, so a command still races honestly: if the run moves in between, it is refused as
stale. Exit status: 0 accepted, 1 refused (the reason is printed), 2 no answer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from runtrail.commands.client import CommandApiError, CommandClient
from runtrail.commands.model import CommandOutcome


def _client_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="run ID")
    parser.add_argument("--url", default=os.environ.get("RUNTRAIL_COMMAND_URL"))
    parser.add_argument("--token", default=os.environ.get("RUNTRAIL_COMMAND_TOKEN"))
    parser.add_argument("--expected-version", type=int, help="the version you observed")
    parser.add_argument("--key", help="idempotency key (default: a new one)")
    parser.add_argument("--by", default=os.environ.get("USER", "operator"), help="operator id")


def register(subparsers: Any) -> None:
    command = subparsers.add_parser("command", help="send a command to a run (command API)")
    verbs = command.add_subparsers(dest="verb", metavar="VERB", required=True)
    approve = verbs.add_parser("approve", help="grant the run's pending approval")
    _client_flags(approve)
    approve.add_argument("--digest", help="the pending action digest (default: the run's)")
    approve.set_defaults(func=_approve)
    deny = verbs.add_parser("deny", help="refuse the run's pending approval (the run fails)")
    _client_flags(deny)
    deny.add_argument("--digest", help="the pending action digest (default: the run's)")
    deny.add_argument("--reason")
    deny.set_defaults(func=_deny)
    cancel = verbs.add_parser("cancel", help="request the run's cancellation")
    _client_flags(cancel)
    cancel.add_argument("--reason")
    cancel.set_defaults(func=_cancel)
    send = verbs.add_parser("send", help="send any command: NAME and its --data (JSON)")
    _client_flags(send)
    send.add_argument("name", help="command name, e.g. provide_input")
    send.add_argument("--data", default="{}", help="the command's data, a JSON object")
    send.set_defaults(func=_send)
    show = verbs.add_parser("show", help="the run's version, status and allowed commands")
    _client_flags(show)
    show.set_defaults(func=_show)

    resume = subparsers.add_parser("resume", help="resume a run (seed 002 resume protocol)")
    resume.add_argument("run", help="run ID")
    resume.add_argument("--tenant", default=os.environ.get("RUNTRAIL_TENANT"))
    resume.add_argument(
        "--store",
        default=os.environ.get("RUNTRAIL_COMMAND_API_STORE"),
        help="command store URL (default: the command API's, else "
        "sqlite:///<RUNTRAIL_STATE_DIR>/commands.db); or use --url",
    )
    resume.add_argument("--url", default=os.environ.get("RUNTRAIL_COMMAND_URL"))
    resume.add_argument("--token", default=os.environ.get("RUNTRAIL_COMMAND_TOKEN"))
    resume.set_defaults(func=_resume)


def _client(args: argparse.Namespace) -> CommandClient:
    if not args.url or not args.token:
        raise CommandApiError(None, "--url and --token (or RUNTRAIL_COMMAND_URL/_TOKEN) are needed")
    return CommandClient(args.url, args.token)


def _report(outcome: CommandOutcome) -> int:
    print(json.dumps(outcome.model_dump(mode="json", by_alias=True), indent=2))
    if outcome.accepted:
        return 0
    print(f"refused ({outcome.code}): {outcome.reason}", file=sys.stderr)
    return 1


def _version(client: CommandClient, args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    found = client.run(args.run)
    if found is None:
        raise CommandApiError(404, f"no run {args.run}")
    version = found["version"] if args.expected_version is None else args.expected_version
    return int(version), found


def _guarded(work: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(work(args))
        except CommandApiError as exc:
            print(f"runtrail command: {exc}", file=sys.stderr)
            return 2
        except ValueError as exc:
            print(f"runtrail command: {exc}", file=sys.stderr)
            return 2

    return run


@_guarded
def _approve(args: argparse.Namespace) -> int:
    client = _client(args)
    version, found = _version(client, args)
    digest = args.digest or found["state"].get("pendingActionDigest")
    if not digest:
        print(f"run {args.run} has no pending approval", file=sys.stderr)
        return 1
    return _report(
        client.approve(
            args.run, digest, args.by, expected_version=version, idempotency_key=args.key
        )
    )


@_guarded
def _deny(args: argparse.Namespace) -> int:
    client = _client(args)
    version, found = _version(client, args)
    digest = args.digest or found["state"].get("pendingActionDigest")
    data = {"actionDigest": digest, "deniedBy": args.by, "reason": args.reason}
    actor = {"kind": "operator", "id": args.by}
    return _report(
        client.send(
            args.run,
            "deny_approval",
            data,
            expected_version=version,
            idempotency_key=args.key,
            actor=actor,
        )
    )


@_guarded
def _cancel(args: argparse.Namespace) -> int:
    client = _client(args)
    version, _ = _version(client, args)
    return _report(client.cancel(args.run, args.by, args.reason, expected_version=version))


@_guarded
def _send(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        data = json.loads(args.data)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--data is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("--data must be a JSON object")
    version = (
        client.current_version(args.run) if args.expected_version is None else args.expected_version
    )
    actor = {"kind": "operator", "id": args.by}
    return _report(
        client.send(
            args.run,
            args.name,
            data,
            expected_version=version,
            idempotency_key=args.key,
            actor=actor,
        )
    )


@_guarded
def _show(args: argparse.Namespace) -> int:
    found = _client(args).run(args.run)
    if found is None:
        print(f"no run {args.run}", file=sys.stderr)
        return 1
    print(json.dumps(found, indent=2))
    return 0


def _resume(args: argparse.Namespace) -> int:
    # imported here: the resume protocol loads the event store, which the other verbs never need
    from runtrail.commands.resume import ResumeRefused

    try:
        if args.store or not args.url:
            if not args.store:
                from runtrail.commands import default_store_url
                from runtrail.config import Settings

                args.store = default_store_url(Settings().state_dir)
            if not args.tenant:
                raise CommandApiError(None, "--tenant (or RUNTRAIL_TENANT) is needed with --store")
            from runtrail.commands.resume import resume_run
            from runtrail.persistence import COMMAND_EVENTS, open_store
            from runtrail_tools.cli.store_open import open_store_or_explain

            url = args.store
            store = open_store_or_explain(  # it records outcomes, into the API's own store
                "command", url, lambda: open_store(COMMAND_EVENTS, url), mode="existing"
            )
            try:
                report = resume_run(store, args.tenant, args.run).json_form()
            finally:
                store.close()
        else:
            report = _client(args).resume(args.run)
    except ResumeRefused as exc:
        print(f"runtrail resume: refused ({exc.code}): {exc.reason}", file=sys.stderr)
        return 1
    except CommandApiError as exc:
        print(f"runtrail resume: {exc}", file=sys.stderr)
        return 1 if exc.status == 422 else 2
    print(json.dumps(report, indent=2))
    return 0
