"""Whole numbers written as text by others (query parameters, headers, attribute keys, stored
forms): ASCII digits only, within the 64-bit range the stores hold.

Why one function: ``str.isdigit()`` is true for "²" and other digits ``int()`` refuses (or reads
as another number), and ``int()`` refuses more than 4,300 digits; a check with ``isdigit`` alone
let such text through to an ``int()`` that raised, which an HTTP handler answered with a 500
and a mapper with a lost span.
"""

from __future__ import annotations

#: The largest value a store's integer column holds (a signed 64-bit integer).
MAX_INT64 = 2**63 - 1


def whole_number(text: str | None, maximum: int = MAX_INT64) -> int | None:
    """``text`` as a whole number from 0 to ``maximum``; None for anything else (absent or
    empty, a sign, a space, a digit that is not ASCII, too large)."""
    if not text or len(text) > 19 or not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= maximum else None


def signed_number(text: str | None) -> int | None:
    """:func:`whole_number`, or its negative after one leading ``-``."""
    if text and text.startswith("-"):
        value = whole_number(text[1:])
        return None if value is None else -value
    return whole_number(text)
