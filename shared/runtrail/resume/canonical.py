"""The canonical form of prompts and tool arguments: RFC 8785, shared with the audit chain."""

from runtrail.events.jsonform import canonical_bytes as canonical_json

__all__ = ["canonical_json"]
