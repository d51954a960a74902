"""Size, depth and number limits on events: one check, used at publish and at consume.

Why: a legal but huge, deeply nested or non-finite event must be refused with a reason, never
crash a process (Python's recursion limit, a client's ``message.max.bytes``) or be sealed in a
form that cannot be canonicalized. The publisher rejects such input with the reason (and the
rest of a file is still sent); the consumer runtime dead-letters it with the same reason.

The walk is iterative, so a value nested 100,000 deep is measured, not recursed into.
:meth:`EventLimits.check_form` skips it when one compiled pass shows that no limit can be
crossed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from runtrail.events import native
from runtrail.events.errors import EventError

if TYPE_CHECKING:
    from runtrail.config import Settings

#: Default largest encoded event (Avro single-object bytes); topics and clients are sized to it.
DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024
#: Default deepest nesting of objects/arrays inside an event's JSON form.
DEFAULT_MAX_JSON_DEPTH = 128


class TooLarge(EventError):
    """The encoded event is larger than ``max_event_bytes``."""

    reason = "too-large"


class TooDeep(EventError):
    """Objects/arrays are nested deeper than ``max_json_depth``."""

    reason = "too-deep"


class NonFinite(EventError):
    """A number is NaN or ±Infinity: JSON has no such value and RFC 8785 cannot hash it."""

    reason = "non-finite"


@dataclass(frozen=True, slots=True)
class EventLimits:
    """The limits in force; build it once per process from :class:`~runtrail.config.Settings`."""

    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH

    @classmethod
    def from_settings(cls, settings: Settings) -> EventLimits:
        return cls(max_event_bytes=settings.max_event_bytes, max_json_depth=settings.max_json_depth)

    def check_size(self, size: int, what: str = "event") -> None:
        """Raise :class:`TooLarge` if ``size`` bytes exceed the limit."""
        if size > self.max_event_bytes:
            raise TooLarge(
                f"{what} is {size} bytes, over the limit of {self.max_event_bytes} "
                "(RUNTRAIL_MAX_EVENT_BYTES)"
            )

    def check_form(self, form: Any) -> None:
        """:meth:`check_value` of a whole event, skipped only when it cannot raise: the
        compiled pass accepts only plain JSON types with finite floats, nested less deep than
        the limit. Anything else (no compiled module, a float it does not take, a tuple, an
        object orjson converts, a value as deep as the limit) takes the walk, which gives the
        verdict and the path. The pass stops at the limit, so a value nested 5,000 deep costs
        it no more than one nested 128 deep."""
        if _plain_within is not None and _plain_within(form, self.max_json_depth) is True:
            return
        self.check_value(form)

    def check_value(self, value: Any, where: str = "event", depth: int = 0) -> None:
        """Raise :class:`TooDeep` or :class:`NonFinite` (naming the path) for a JSON value
        found ``depth`` levels down (a field of an object checked one field at a time).

        A child's path is kept as (parent's path, key, is-index) and only spelled out for a
        reason: formatting one per nested value was most of the walk's cost."""
        limit = self.max_json_depth
        stack: list[tuple[Any, int, Any]] = [(value, depth, where)]
        pop, push = stack.pop, stack.append
        while stack:
            item, depth, path = pop()
            kind = type(item)
            if kind is float or (kind is not bool and isinstance(item, float)):
                if not math.isfinite(item):
                    raise NonFinite(f"{_spell(path)} is {item!r}: NaN and Infinity are not JSON")
            elif kind is dict or isinstance(item, dict):
                if depth >= limit:
                    raise TooDeep(
                        f"{_spell(path)} is nested deeper than {limit} levels "
                        "(RUNTRAIL_MAX_JSON_DEPTH)"
                    )
                for key, child in item.items():
                    if type(child) in _SCALARS:
                        continue
                    push((child, depth + 1, (path, key, False)))
            elif kind is list or isinstance(item, (list, tuple)):
                if depth >= limit:
                    raise TooDeep(
                        f"{_spell(path)} is nested deeper than {limit} levels "
                        "(RUNTRAIL_MAX_JSON_DEPTH)"
                    )
                for index, child in enumerate(item):
                    if type(child) in _SCALARS:
                        continue
                    push((child, depth + 1, (path, index, True)))


def _spell(path: Any) -> str:
    """``data.a[2].b`` from the chain of (parent, key, is-index) a walk keeps."""
    parts: list[str] = []
    while not isinstance(path, str):
        path, key, is_index = path
        parts.append(f"[{key}]" if is_index else f".{key}")
    parts.append(path)
    return "".join(reversed(parts))


_SCALARS = frozenset({str, int, bool, type(None)})

#: True only for a value of plain JSON types whose floats are all finite, no container nested
#: as deep as the limit given (it also refuses some finite floats and large ints: those take
#: the walk). None without runtrail_native (or one built before it had this pass).
_plain_within: Any = getattr(native.NATIVE, "jcs_fast_ok_within", None)

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_JSON_DEPTH",
    "EventLimits",
    "NonFinite",
    "TooDeep",
    "TooLarge",
]
