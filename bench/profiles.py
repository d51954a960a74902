"""The top entries of a saved pyinstrument session: where a service's time goes, by function.

Cumulative time counts a function once per stack (recursion is not double-counted); self
time is the time spent in the function's own code (pyinstrument's synthetic ``[self]`` frames
folded into their parent). Both as a share of the whole run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any


def _name(frame: Any) -> str:
    return f"{frame.function} ({frame.file_path_short}:{frame.line_no})"


def top_entries(session_path: Path, limit: int = 25) -> list[str]:
    """Lines ``cumulative% self% function (file:line)``, the largest cumulative first; the
    same lines are written beside the session as ``<name>-top.txt``."""
    from pyinstrument.session import Session

    root = Session.load(str(session_path)).root_frame()
    if root is None:
        return []
    total = root.time or 1.0
    cumulative: Counter[str] = Counter()
    own: Counter[str] = Counter()
    stack: list[tuple[Any, frozenset[str]]] = [(root, frozenset())]
    while stack:
        frame, above = stack.pop()
        if frame.is_synthetic:  # "[self]" and the like: counted in the parent's self time
            continue
        name = _name(frame)
        if name not in above:
            cumulative[name] += frame.time
        own[name] += frame.total_self_time
        for child in frame.children:
            stack.append((child, above | {name}))
    lines = [
        f"{100 * t / total:6.1f}% {100 * own[n] / total:6.1f}%  {n}"
        for n, t in cumulative.most_common(limit)
    ]
    by_self = [f"{100 * t / total:6.1f}%  {n}" for n, t in own.most_common(limit)]
    out = session_path.with_name(session_path.name.replace("-profile.json", "-top.txt"))
    out.write_text(
        "cumulative  self  function, by cumulative time\n"
        + "\n".join(lines)
        + "\n\nself  function, by self time\n"
        + "\n".join(by_self)
        + "\n"
    )
    return lines
