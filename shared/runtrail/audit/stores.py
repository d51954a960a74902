"""``open_link_store(url)``: the audit link store a URL names, through the one registry.

Kept as a name for the tests and benchmarks that use it (runtrail's own code calls the
registry); it is exactly ``open_store(AUDIT_LINKS, url)``
(:mod:`runtrail.persistence.registry`). The adapters are :mod:`~runtrail.audit.store_sqlite`
(``sqlite:///abs/path.db``, ``memory://``) and :mod:`~runtrail.audit.store_postgres`
(``postgresql://``, ``postgres://``).
"""

from __future__ import annotations

from runtrail.audit.store import LinkStore
from runtrail.persistence.kinds import AUDIT_LINKS
from runtrail.persistence.registry import open_store


def open_link_store(url: str) -> LinkStore:
    """A :class:`LinkStore` for ``url``; :class:`ValueError` for a scheme no adapter takes."""
    return open_store(AUDIT_LINKS, url)
