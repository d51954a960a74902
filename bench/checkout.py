"""A measurement with another checkout's library: what a child process imports runtrail from.

The benchmarks that compare this checkout with another (``--baseline``) run each measurement
in a fresh process whose ``PYTHONPATH`` puts that checkout's packages first; the benchmarks
themselves always come from this one, so both sides are measured by the same code.
"""

from __future__ import annotations

import os
from pathlib import Path

#: the root of this checkout (its ``bench`` package is what measures)
HERE = Path(__file__).resolve().parent.parent


def checkout_paths(root: Path) -> str:
    """``PYTHONPATH`` for the library, services, tools and schemas under ``root``, then this
    checkout's benchmarks."""
    parts = [root / "shared", root / "services", root / "tools", root / "schemas", HERE]
    return os.pathsep.join(map(str, parts))


def checkout_env(root: Path) -> dict[str, str]:
    """This process's environment, importing runtrail from the checkout at ``root``."""
    return {**os.environ, "PYTHONPATH": checkout_paths(root)}
