"""Opening an obstore store from a sink URL: query parameters and environment as options.

``s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1&allow_http=true``:
HTTP-client keys (``allow_http``, ``timeout``…) become obstore client options, every other key
goes to the store's config (``endpoint``, ``region``, ``access_key_id``…). Anything not given
is read by obstore from the environment (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``).
"""

from __future__ import annotations

from typing import Any

import obstore.store

from runtrail.persistence.url_options import as_bool

CLIENT_KEYS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "http1_only",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "randomize_addresses",
        "read_timeout",
        "timeout",
        "user_agent",
    }
)
_CLIENT_BOOLS = frozenset(
    {"allow_http", "allow_invalid_certificates", "http1_only", "http2_only", "randomize_addresses"}
)


def open_object_store(base_url: str, options: dict[str, Any]) -> Any:
    """An obstore store for ``base_url``; consumes the store options from ``options``."""
    client: dict[str, Any] = {}
    config: dict[str, Any] = {}
    for key in list(options):
        value = options.pop(key)
        if key in CLIENT_KEYS:
            client[key] = as_bool(value) if key in _CLIENT_BOOLS else value
        else:
            config[key] = value
    from_url: Any = obstore.store.from_url  # the typed overloads want per-scheme TypedDicts
    return from_url(base_url, config=config or None, client_options=client or None)
