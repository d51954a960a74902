"""``runtrail keys rotate --tenant T``: rotate a tenant key of the key store.

A new tenant key is made and every data key of the tenant re-wrapped with it; no content is
touched. ``--retire`` then deletes the older tenant keys, so a backup of the key store taken
before (which holds data keys wrapped by them, including keys erased since) no longer opens
with the live tenant keys. Prints ``{"tenant", "rewrapped", "retired"}`` as one JSON line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from runtrail_tools.cli.common import add_common_flags, settings_from_args

EXIT_OK, EXIT_USAGE = 0, 2


def register(subparsers: Any) -> None:
    keys = subparsers.add_parser(
        "keys", help="manage the key store of protected content", description=__doc__
    )
    sub = keys.add_subparsers(dest="keys_command", metavar="COMMAND", required=True)
    rotate = sub.add_parser("rotate", help="rotate a tenant key, re-wrapping its data keys")
    rotate.add_argument("--retire", action="store_true", help="then delete the older keys")
    add_common_flags(rotate)
    rotate.set_defaults(func=run_rotate)


def run_rotate(args: argparse.Namespace) -> int:
    from runtrail.privacy.keys_file import FileKeyStore, FileTenantKeyring
    from runtrail.privacy.protect import vault_from_settings

    if not args.tenant:
        print("runtrail keys rotate: --tenant is required", file=sys.stderr)
        return EXIT_USAGE
    settings = settings_from_args(args)
    vault = vault_from_settings(settings)
    if vault is None or not isinstance(vault.keys, FileKeyStore):
        print("runtrail keys rotate: no file key store configured", file=sys.stderr)
        return EXIT_USAGE
    try:
        rewrapped = vault.keys.rotate(args.tenant)
        retired: list[str] = []
        keyring = vault.keys.keyring
        if args.retire and isinstance(keyring, FileTenantKeyring):
            retired = keyring.retire_older(args.tenant)
    finally:
        vault.close()
    answer = {"tenant": args.tenant, "rewrapped": rewrapped, "retired": retired}
    sys.stdout.write(orjson.dumps(answer).decode() + "\n")
    return EXIT_OK
