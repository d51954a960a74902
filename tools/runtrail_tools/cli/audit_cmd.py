"""``runtrail audit …``: verify, export, head, prove, tree-head, log-checkpoint, keygen.

Every command prints JSON on stdout. Exit status: 0 when all is well, 1 when a chain is invalid
or a command found nothing to act on (``verify``/``export`` of a run with no chain fail, naming
the tenant and run looked up: verifying nothing is never "valid"), 2 when the input cannot be used (a missing file, an
unreachable store, an untrusted tree head). ``--store URL`` (or ``RUNTRAIL_AUDIT_STORE_URL``)
picks the link store; the default is the embedded ``sqlite:///<state dir>/audit.db``.

A command that only reads (verify, export, head, prove, log-prove, log-consistency, bundle)
never creates, migrates or changes the store; tree-head and log-checkpoint write into one that
exists. A store that is missing, of another kind, or of another runtrail version exits 2 naming
it (:mod:`runtrail_tools.cli.store_open`). A chain is selected by ``--run`` in ``--tenant``
(else ``RUNTRAIL_TENANT``); with neither, in whichever tenant holds the run, as
``projection show`` finds it (exit 2 naming them when several do).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtrail.audit.errors import AuditError
from runtrail.audit.export import export_lines, read_export, verify_export, write_export
from runtrail.audit.link import Link, genesis_head
from runtrail.audit.store import LinkStore, verify_stored
from runtrail.audit.store_sqlite import PAGE_SIZE, path_from_url
from runtrail.audit.tree_head import verify_tree_head
from runtrail.audit.verify import ChainVerification, nothing_verified
from runtrail.config import Settings
from runtrail.files import private_dir
from runtrail.persistence.kinds import AUDIT_LINKS
from runtrail.persistence.migrations import Opening, opening
from runtrail.persistence.registry import open_store
from runtrail.persistence.sqlite import PAGE_SIZES, InUse, NoDatabase, repage
from runtrail.persistence.urls import redact_url, scheme_of
from runtrail_tools.cli.common import add_common_flags, settings_from_args
from runtrail_tools.cli.store_open import (
    AmbiguousRun,
    explain_store_error,
    is_store_error,
    tenant_holding,
    tenant_scope,
)

if TYPE_CHECKING:  # the service package is imported only when a command runs
    from runtrail_services.audit.settings import AuditSettings

log = logging.getLogger(__name__)

VALID, INVALID, UNUSABLE = 0, 1, 2
#: how often a long ``audit repage`` says it is still working
PROGRESS_EVERY_S = 5.0


class Unusable(Exception):
    """The command cannot do its job with what it was given (exit status 2)."""


class NothingFound(Exception):
    """The store holds nothing for what was asked (exit status 1): never a silent success."""


def _no_chain(command: str, tenant: str, run: str, url: str) -> NothingFound:
    return NothingFound(
        f"audit {command}: no audit chain for tenant {tenant!r}, run {run!r} in "
        f"{redact_url(url)} (check --tenant and --run)"
    )


def _emit(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False), flush=True)


def _verdict(result: ChainVerification) -> int:
    _emit(result.to_json())
    if result.detail and not result.valid:
        print(f"audit verify: {result.reason}: {result.detail}", file=sys.stderr)
    return VALID if result.valid else INVALID


# --- registration ----------------------------------------------------------------------------
def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "audit",
        help="verify, export and prove the audit chains",
        description="Verify, export and prove the per-run audit hash chains.",
    )
    commands = parser.add_subparsers(dest="audit_command", metavar="COMMAND", required=True)

    verify, chain = _chain_command(
        commands, "verify", "verify a run's chain (store) or an export (file)"
    )
    source = chain.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="run ID whose chain in the store to verify")
    source.add_argument("--file", type=Path, help="an export (links.jsonl) to verify, no DB")
    verify.add_argument(
        "--tree-head",
        "--checkpoint",
        dest="tree_head",
        type=Path,
        action="append",
        default=[],
        metavar="NOTE",
        help="a signed tree head you trust (repeat for several: a fork is then detected)",
    )
    verify.add_argument(
        "--public-key",
        type=Path,
        help="key that signed the tree heads: name+id+key string, PEM or raw Ed25519",
    )
    verify.add_argument(
        "--proof",
        type=Path,
        action="append",
        default=[],
        help="head proof (from `audit prove`) per --tree-head, in order; "
        "missing ones are taken from the store",
    )
    verify.set_defaults(func=cmd_verify)

    export, chain = _chain_command(commands, "export", "write a run's links as JSONL")
    chain.add_argument("--run", required=True, help="run ID to export")
    export.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    export.set_defaults(func=cmd_export)

    head, chain = _chain_command(
        commands, "head", "print a run's head {tenantId, runId, length, hash}"
    )
    chain.add_argument("--run", required=True, help="run ID")
    head.set_defaults(func=cmd_head)

    prove, chain = _chain_command(
        commands, "prove", "inclusion proof of a run's head in a tree head"
    )
    chain.add_argument("--run", required=True, help="run ID")
    prove.add_argument(
        "--tree-head-id",
        "--checkpoint-id",
        dest="tree_head_id",
        type=int,
        help="a stored tree head (default: latest)",
    )
    prove.add_argument("-o", "--output", type=Path, help="also write the JSON to this file")
    prove.set_defaults(func=cmd_prove)

    for name, func in (("tree-head", cmd_tree_head), ("checkpoint", cmd_checkpoint_alias)):
        tree_head = _command(
            commands, name, "sign a tree head over all run heads now", hidden=name == "checkpoint"
        )
        tree_head.add_argument("-o", "--output", type=Path, help="write the signed note here")
        tree_head.add_argument(
            "--no-publish", action="store_true", help="do not publish it to the audit topic"
        )
        tree_head.set_defaults(func=func)

    log_checkpoint = _command(
        commands, "log-checkpoint", "sign the transparency log's checkpoint now and write its tiles"
    )
    log_checkpoint.add_argument("-o", "--output", type=Path, help="write the signed note here")
    log_checkpoint.set_defaults(func=cmd_log_checkpoint)

    log_prove, chain = _chain_command(
        commands, "log-prove", "inclusion proof of a run's link in the transparency log"
    )
    chain.add_argument("--run", required=True, help="run ID")
    log_prove.add_argument("--index", type=int, help="the link's index (default: the last)")
    log_prove.add_argument("--size", type=int, help="a signed log size (default: the latest)")
    log_prove.add_argument("-o", "--output", type=Path, help="also write the JSON to this file")
    log_prove.set_defaults(func=cmd_log_prove)

    log_consistency = _command(
        commands, "log-consistency", "consistency proof between two log checkpoints"
    )
    log_consistency.add_argument("--old", type=int, required=True, help="the older signed size")
    log_consistency.add_argument("--new", type=int, help="the newer signed size (default: latest)")
    log_consistency.add_argument("-o", "--output", type=Path, help="also write the JSON here")
    log_consistency.set_defaults(func=cmd_log_consistency)

    bundle, chain = _chain_command(
        commands, "bundle", "write a run's offline proof bundle (links, proofs, tree head, keys)"
    )
    chain.add_argument("--run", required=True, help="run ID")
    bundle.add_argument("-o", "--output", type=Path, required=True, help="the bundle file")
    bundle.set_defaults(func=cmd_bundle)

    repage = _command(
        commands,
        "repage",
        "rebuild an SQLite store with larger pages (every audit member stopped)",
    )
    repage.add_argument(
        "--page-size",
        type=int,
        default=PAGE_SIZE,
        choices=PAGE_SIZES,
        metavar="BYTES",
        help=f"the new page size (default: {PAGE_SIZE}, what a new store gets)",
    )
    repage.set_defaults(func=cmd_repage)

    keygen = _command(commands, "keygen", "generate the Ed25519 tree head signing key")
    keygen.add_argument("--format", choices=["pem", "raw"], default="pem")
    keygen.set_defaults(func=cmd_keygen)


def _command(
    commands: Any, name: str, help_text: str, chain: Any = None, *, hidden: bool = False
) -> argparse.ArgumentParser:
    """A subcommand with the store, key and common flags (``--tenant`` among the connection
    flags unless the command selects a chain: see :func:`_chain_command`). A ``hidden`` one
    (an old name kept working) is left out of the command list."""
    listed = {} if hidden else {"help": help_text}
    parser: argparse.ArgumentParser = commands.add_parser(name, description=help_text, **listed)
    if chain is not None:
        chain(parser)
    parser.add_argument(
        "--store",
        help="link store URL: sqlite:///path.db or postgresql://… (RUNTRAIL_AUDIT_STORE_URL)",
    )
    parser.add_argument("--key", type=Path, help="tree head key file (RUNTRAIL_AUDIT_KEY_PATH)")
    parser.add_argument("--key-name", help="tree head key name (RUNTRAIL_AUDIT_KEY_NAME)")
    parser.add_argument("--origin", help="tree head origin (RUNTRAIL_AUDIT_ORIGIN)")
    parser.add_argument("--log-origin", help="transparency log origin (RUNTRAIL_AUDIT_LOG_ORIGIN)")
    parser.add_argument(
        "--tiles", help="where the log's tiles go: file:///dir or s3://… (RUNTRAIL_AUDIT_TILES_URL)"
    )
    add_common_flags(parser, tenant=chain is None)
    return parser


def _chain_command(commands: Any, name: str, help_text: str) -> tuple[Any, Any]:
    """A subcommand whose help lists ``--tenant`` first in a "chain" section, where the caller
    adds ``--run``: a chain is selected by tenant and run together, not by a connection flag."""
    groups: list[Any] = []

    def chain(parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("chain", "which run's chain: --tenant with --run")
        group.add_argument(
            "--tenant",
            help="tenant ID of the run (RUNTRAIL_TENANT; default: the tenant holding the run)",
        )
        groups.append(group)

    parser = _command(commands, name, help_text, chain)
    return parser, groups[0]


# --- plumbing --------------------------------------------------------------------------------
def _audit_settings(args: argparse.Namespace) -> AuditSettings:
    from runtrail_services.audit.settings import AuditSettings

    return AuditSettings.load(
        {
            "store_url": args.store,
            "key_path": args.key,
            "key_name": args.key_name,
            "origin": args.origin,
            "log_origin": args.log_origin,
            "tiles_url": args.tiles,
        }
    )


def _store_url(args: argparse.Namespace, settings: Settings) -> str:
    return _audit_settings(args).resolved_store_url(settings.state_dir)


@contextmanager
def _store(
    args: argparse.Namespace, settings: Settings, mode: Opening = "read"
) -> Iterator[LinkStore]:
    """The link store, opened as ``mode`` says: ``"read"`` (nothing created, migrated or
    changed) unless the command writes; a store error while it is used is :class:`Unusable`."""
    url = _store_url(args, settings)
    try:
        with opening(mode):
            store = open_store(AUDIT_LINKS, url)
    except Exception as exc:
        raise Unusable(explain_store_error("audit", url, exc)) from exc
    try:
        yield store
    except Exception as exc:
        if isinstance(exc, OSError) or not is_store_error(exc):  # an OSError: a file of ours
            raise
        raise Unusable(explain_store_error("audit", url, exc, doing="read")) from exc
    finally:
        store.close()


def _tenant(args: argparse.Namespace, settings: Settings, store: LinkStore) -> str:
    """The tenant of ``--run``'s chain: ``--tenant`` (or ``RUNTRAIL_TENANT``) when given, else
    the one tenant whose chains hold the run (as ``projection show`` finds it)."""
    given = tenant_scope(args)
    if given is not None:
        return given
    command = f"audit {args.audit_command}"
    try:
        found = tenant_holding(
            args.run, [h.tenant_id for h in store.heads() if h.run_id == args.run]
        )
    except AmbiguousRun as exc:
        raise Unusable(f"{command}: {exc}") from exc
    if found is None:
        raise NothingFound(
            f"{command}: no audit chain of run {args.run!r} in any tenant of "
            f"{redact_url(_store_url(args, settings))} (check --run)"
        )
    return found


def _guarded(func: Callable[[argparse.Namespace, Settings], int]) -> Callable[..., int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args, settings_from_args(args))
        except NothingFound as exc:
            print(json.dumps({"error": str(exc)}), file=sys.stderr)
            return INVALID
        except (Unusable, OSError, AuditError, ValueError) as exc:
            print(json.dumps({"error": str(exc)}), file=sys.stderr)
            return UNUSABLE

    return run


# --- commands --------------------------------------------------------------------------------
@_guarded
def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    if args.tree_head:
        return _verify_anchored(args, settings)
    if args.file is not None:
        if not args.file.exists():
            raise Unusable(f"no such file: {args.file}")
        result = verify_export(args.file)
        if result.length == 0:  # nothing verified is not "valid"
            print(f"audit verify: {args.file} holds no links", file=sys.stderr)
            return _verdict(nothing_verified())
        return _verdict(result)
    try:
        with _store(args, settings) as store:
            tenant = _tenant(args, settings, store)
            result = verify_stored(store, tenant, args.run)
    except NothingFound as exc:  # in no tenant: nothing verified, as in the tenant given
        print(exc, file=sys.stderr)
        return _verdict(nothing_verified())
    if result.length == 0:
        print(_no_chain("verify", tenant, args.run, _store_url(args, settings)), file=sys.stderr)
        return _verdict(nothing_verified())
    return _verdict(result)


def _verify_anchored(args: argparse.Namespace, settings: Settings) -> int:
    from runtrail_services.audit.trust import (
        Anchor,
        load_verifier,
        proof_from_store,
        read_proof,
        verify_anchored,
    )

    if args.public_key is None:
        raise Unusable("--tree-head needs --public-key (the key that signed it)")
    if len(args.proof) > len(args.tree_head):
        raise Unusable("more --proof files than --tree-head files")
    audit = _audit_settings(args)
    verifier = load_verifier(args.public_key, audit.key_name)
    tree_heads = []
    for path in args.tree_head:
        try:
            tree_heads.append(verify_tree_head(path.read_text("utf-8"), verifier))
        except AuditError as exc:
            raise Unusable(f"tree head {path} is not trusted: {exc}") from exc
    proofs = [read_proof(path) for path in args.proof]
    links: list[Link] = []
    if args.file is not None:
        own = verify_export(args.file)
        if not own.valid:  # broken on its own: that is the finding
            return _verdict(own)
        links = read_export(args.file)
        if links:
            tenant, run = links[0].tenant_id, links[0].run_id
        elif proofs:
            tenant, run = proofs[0].head.tenant_id, proofs[0].head.run_id
        else:
            raise Unusable("an empty export names no run: give --proof")
        if len(proofs) == len(tree_heads):  # everything at hand: no store needed
            anchors = [Anchor(cp, pr) for cp, pr in zip(tree_heads, proofs, strict=True)]
            return _verdict(verify_anchored(links, tenant, run, anchors))
    with _store(args, settings) as store:
        if args.file is None:
            tenant, run = _tenant(args, settings, store), args.run
            own = verify_stored(store, tenant, run)
            if not own.valid:
                return _verdict(own)
            links = store.load_chain(tenant, run)
        anchors = [
            Anchor(cp, proofs[i] if i < len(proofs) else proof_from_store(store, cp, tenant, run))
            for i, cp in enumerate(tree_heads)
        ]
    return _verdict(verify_anchored(links, tenant, run, anchors))


@_guarded
def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    with _store(args, settings) as store:
        tenant = _tenant(args, settings, store)
        links = store.load_chain(tenant, args.run)
    if not links:  # checked before writing: no empty file is left to pass for an export
        raise _no_chain("export", tenant, args.run, _store_url(args, settings))
    if args.output is not None:
        count = write_export(args.output, links)
        _emit({"file": str(args.output), "links": count})
    else:
        out = sys.stdout.buffer
        for line in export_lines(links):
            out.write(line)
        out.flush()
    return VALID


@_guarded
def cmd_head(args: argparse.Namespace, settings: Settings) -> int:
    with _store(args, settings) as store:
        tenant = _tenant(args, settings, store)
        head = store.head(tenant, args.run)
    if head is None:
        # the genesis head is still printed (what a first link would chain onto), but a run with
        # no links is not a head to trust: the wrong --tenant or a typo exits 1, like verify
        print(
            f"audit head: run {tenant}/{args.run} has no links in "
            f"{redact_url(_store_url(args, settings))}",
            file=sys.stderr,
        )
        _emit(genesis_head(tenant, args.run).to_json())
        return INVALID
    _emit(head.to_json())
    return VALID


@_guarded
def cmd_prove(args: argparse.Namespace, settings: Settings) -> int:
    from runtrail.audit.tree_head import prove_head
    from runtrail_services.audit.trust import proof_bundle

    with _store(args, settings) as store:
        tenant = _tenant(args, settings, store)
        if args.tree_head_id is None:
            stored = store.latest_tree_head()
        else:
            stored = store.get_tree_head(args.tree_head_id)
        if stored is None:
            _emit({"error": "no such tree head in the store (see `runtrail audit tree-head`)"})
            return INVALID
        heads = store.committed_heads(stored.tree_head_id)
        chain = store.head(tenant, args.run)
    try:
        proof = prove_head(heads, tenant, args.run)
    except KeyError:
        if chain is None:  # no newer tree head can help: the run has no chain at all
            raise _no_chain("prove", tenant, args.run, _store_url(args, settings)) from None
        _emit(
            {
                "error": f"run {tenant}/{args.run} is not in tree head "
                f"{stored.tree_head_id} (sign a newer one)"
            }
        )
        return INVALID
    bundle = proof_bundle(stored.note, stored.tree_head_id, proof)
    if args.output is not None:
        args.output.write_text(json.dumps(bundle, ensure_ascii=False) + "\n", "utf-8")
    _emit(bundle)
    return VALID


@_guarded
def cmd_tree_head(args: argparse.Namespace, settings: Settings) -> int:
    from runtrail_services.audit.signing import load_or_create_signer
    from runtrail_services.audit.tree_heads import sign_and_store

    audit = _audit_settings(args)
    with _store(args, settings, "existing") as store:  # signs what a service wrote
        signer = load_or_create_signer(audit.resolved_key_path(settings.state_dir), audit.key_name)
        stored = sign_and_store(store, signer, audit.origin).stored
    assert stored is not None
    if args.output is not None:
        args.output.write_text(stored.note, "utf-8")
    tree_head = stored.tree_head
    summary = {
        "checkpointId": stored.tree_head_id,
        "origin": tree_head.origin,
        "size": tree_head.size,
        "rootHash": base64.b64encode(tree_head.root_hash).decode(),
        "createdAt": stored.created_at,
        "note": stored.note,
        "verifierKey": signer.verifier.vkey(),
        "published": False,
    }
    if audit.publish and not args.no_publish:
        from runtrail_services.audit.publishing import AuditPublishError, AuditTopic

        topic = AuditTopic(settings, settings.audit_topic)
        topic.send_tree_head(stored)
        try:
            topic.confirm()
        except AuditPublishError as exc:
            _emit(summary)
            print(f"audit tree-head: kept in the store but not published: {exc}", file=sys.stderr)
            return INVALID
        summary["published"] = True
    _emit(summary)
    return VALID


def cmd_checkpoint_alias(args: argparse.Namespace) -> int:
    """``runtrail audit checkpoint``: the old name of ``tree-head``, still answered."""
    print("runtrail audit checkpoint is deprecated: use runtrail audit tree-head", file=sys.stderr)
    return cmd_tree_head(args)


@_guarded
def cmd_log_checkpoint(args: argparse.Namespace, settings: Settings) -> int:
    from runtrail.persistence.kinds import AUDIT_TILES
    from runtrail_services.audit.signing import load_or_create_signer
    from runtrail_services.audit.transparency import LogPublisher

    audit = _audit_settings(args)
    with _store(args, settings, "existing") as store:  # signs what a service wrote
        signer = load_or_create_signer(audit.resolved_key_path(settings.state_dir), audit.key_name)
        tiles = open_store(AUDIT_TILES, audit.resolved_tiles_url(settings.state_dir))
        signed = LogPublisher(store, signer, audit.log_origin, tiles).publish()
        stored = store.latest_log_checkpoint()
    if stored is None:
        raise NothingFound("audit log-checkpoint: the log is empty, nothing to sign")
    if args.output is not None:
        args.output.write_text(stored.note, "utf-8")
    tree_head = stored.tree_head
    _emit(
        {
            "origin": tree_head.origin,
            "size": tree_head.size,
            "rootHash": base64.b64encode(tree_head.root_hash).decode(),
            "note": stored.note,
            "verifierKey": signer.verifier.vkey(),
            "signed": signed is not None,
            "tiles": redact_url(audit.resolved_tiles_url(settings.state_dir)),
        }
    )
    return VALID


def _log_proof(
    args: argparse.Namespace, settings: Settings, prove: Callable[[LinkStore], dict[str, Any]]
) -> int:
    from runtrail.audit.log_proofs import NoProof

    with _store(args, settings) as store:
        try:
            proof = prove(store)
        except NoProof as exc:
            raise NothingFound(f"audit {args.audit_command}: {exc}") from exc
    if args.output is not None:
        args.output.write_text(json.dumps(proof, ensure_ascii=False) + "\n", "utf-8")
    _emit(proof)
    return VALID


@_guarded
def cmd_log_prove(args: argparse.Namespace, settings: Settings) -> int:
    from runtrail.audit.log_proofs import prove_link
    from runtrail.audit.tlog import LogTree

    def prove(store: LinkStore) -> dict[str, Any]:
        tenant = _tenant(args, settings, store)
        index = args.index
        if index is None:
            head = store.head(tenant, args.run)
            if head is None:
                raise _no_chain("log-prove", tenant, args.run, _store_url(args, settings))
            index = head.length - 1
        return prove_link(store, LogTree(), tenant, args.run, index, args.size)

    return _log_proof(args, settings, prove)


@_guarded
def cmd_log_consistency(args: argparse.Namespace, settings: Settings) -> int:
    from runtrail.audit.log_proofs import prove_consistency
    from runtrail.audit.tlog import LogTree

    return _log_proof(
        args, settings, lambda store: prove_consistency(store, LogTree(), args.old, args.new)
    )


@_guarded
def cmd_bundle(args: argparse.Namespace, settings: Settings) -> int:
    from runtrail.audit.bundle import bundle_text, make_bundle
    from runtrail.audit.log_proofs import NoProof
    from runtrail_services.audit.signing import load_or_create_signer

    audit = _audit_settings(args)
    key = audit.resolved_key_path(settings.state_dir)
    vkey = load_or_create_signer(key, audit.key_name).verifier.vkey() if key.exists() else None
    witnesses = list(audit.witnesses.values())
    quorum = audit.witness_quorum if witnesses else 0
    with _store(args, settings) as store:
        try:
            tenant = _tenant(args, settings, store)
            bundle = make_bundle(store, tenant, args.run, vkey, witnesses, quorum)
        except NoProof as exc:
            raise NothingFound(f"audit bundle: {exc}") from exc
    args.output.write_text(bundle_text(bundle), "utf-8")
    _emit(
        {
            "file": str(args.output),
            "proven": len(bundle["proofs"]),
            "treeSize": bundle["treeSize"],
            "keys": bundle["keys"],
        }
    )
    return VALID


@_guarded
def cmd_repage(args: argparse.Namespace, settings: Settings) -> int:
    """Rebuild the SQLite store with ``--page-size`` pages (a store made before new stores got
    16 KiB pages keeps SQLite's 4 KiB: more CPU and more writes an event on random eventIds)."""
    url = _store_url(args, settings)
    if scheme_of(url) != "sqlite":
        raise Unusable(
            f"audit repage rebuilds an SQLite store; {redact_url(url)} is not one "
            "(PostgreSQL's page size is fixed when the server is built)"
        )
    path = Path(path_from_url(url))
    started = time.monotonic()
    said = [started]

    def still_working() -> None:
        now = time.monotonic()
        if now - said[0] >= PROGRESS_EVERY_S:
            said[0] = now
            print(
                f"audit repage: rebuilding {path} ({path.stat().st_size / 1e6:,.0f} MB), "
                f"{now - started:.0f} s so far",
                file=sys.stderr,
                flush=True,
            )

    try:
        result = repage(path, args.page_size, progress=still_working)
    except NoDatabase as exc:
        raise Unusable(f"audit repage: {exc} (check --store or RUNTRAIL_AUDIT_STORE_URL)") from exc
    except InUse as exc:
        raise Unusable(
            f"audit repage: {exc}: stop every audit member and reader of this store, then run "
            "it again (nothing was changed)"
        ) from exc
    _emit(
        {
            "store": str(path),
            "changed": result.page_size != result.page_size_before,
            "pageSizeBefore": result.page_size_before,
            "pageSize": result.page_size,
            "bytesBefore": result.bytes_before,
            "bytes": result.bytes,
            "seconds": round(time.monotonic() - started, 1),
        }
    )
    return VALID


@_guarded
def cmd_keygen(args: argparse.Namespace, settings: Settings) -> int:
    from runtrail.audit.keys import generate_private_key, write_private_key, write_public_key
    from runtrail.audit.note import NoteSigner
    from runtrail_services.audit.signing import public_key_path

    audit = _audit_settings(args)
    path = audit.resolved_key_path(settings.state_dir)
    if path.exists():
        raise Unusable(f"{path} exists; a key is never overwritten (move it away first)")
    private_dir(path.parent)
    key = generate_private_key()
    write_private_key(path, key, args.format)
    pub = public_key_path(path)
    if not pub.exists():
        write_public_key(pub, key.public_key(), args.format)
    signer = NoteSigner(audit.key_name, key)
    _emit({"key": str(path), "publicKey": str(pub), "verifierKey": signer.verifier.vkey()})
    return VALID
