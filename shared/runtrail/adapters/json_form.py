"""Framework objects as the plain JSON an event's data carries: one converter for the adapters.

Each framework hands its callbacks or spans pydantic models, tuples, sets, bytes, non-finite
floats and objects of its own; the event codec takes JSON only. Converting never fails, so a
callback never raises into the agent: what has no JSON form becomes its ``str`` (the publisher
still refuses what is too large or too deep, and counts it). The adapters differ only in what
they pass here: how deep to go, whether a model's unset fields are kept, and a hook for the
framework's own types (LangChain's messages).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

#: What a ``special`` hook returns for a value it does not convert.
UNHANDLED: Any = object()


def jsonable(
    value: Any,
    *,
    max_depth: int,
    exclude_none: bool = False,
    special: Callable[[Any], Any] | None = None,
) -> Any:
    """``value`` as JSON: pydantic models dumped, tuples and sets as lists, bytes as UTF-8 text,
    non-finite floats, values nested ``max_depth`` deep and unknown objects as strings.

    ``special(value)`` is asked first for every non-scalar value; what it returns other than
    :data:`UNHANDLED` is the value's JSON form as it stands."""

    def form(value: Any, depth: int) -> Any:
        if value is None or isinstance(value, bool | int | str):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else str(value)
        if depth >= max_depth:
            return str(value)
        if special is not None and (own := special(value)) is not UNHANDLED:
            return own
        if isinstance(value, BaseModel):
            return form(value.model_dump(mode="json", exclude_none=exclude_none), depth + 1)
        if isinstance(value, Mapping):
            return {str(k): form(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple | set | frozenset):
            return [form(v, depth + 1) for v in value]
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return str(value)

    return form(value, 0)
