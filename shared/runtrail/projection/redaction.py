"""Redacted content fails safely: a masked value is never keyed on, matched, or guessed.

The publisher masks secrets in event payloads with ``[REDACTED]`` (whole values under
sensitive keys, or the secret part of a string). The projector sorts payload fields in two:

* identity fields — ids, digests, idempotency keys, units and expiry times that state is keyed
  on or matched against. A masked one rejects the event (:class:`InvalidTransition`): an
  approval whose ``actionDigest`` is masked cannot be proven to match the pending one, and an
  intent under a masked idempotency key could not be resumed without repeating a side effect.
* descriptive text — reasons and error messages. Kept verbatim: the marker itself shows what
  was masked, and nothing is inferred from the text.
"""

from __future__ import annotations

from runtrail.events import Event
from runtrail.projection.errors import InvalidTransition

#: The publisher's mask (``runtrail.publisher.redaction.REDACTED``; a test keeps them equal).
REDACTED = "[REDACTED]"


def clear(event: Event, name: str, value: str) -> str:
    """``value`` if it is not redacted; otherwise the event is rejected."""
    if REDACTED in value:
        raise InvalidTransition(
            f"{name} is redacted ({value!r}); an identity field is never guessed", event=event
        )
    return value


def clear_optional(event: Event, name: str, value: str | None) -> str | None:
    """As :func:`clear`, letting ``None`` (field absent) through."""
    return None if value is None else clear(event, name, value)
