"""The publisher's hook: protected fields of an event replaced by references before encoding.

Runs after redaction (secrets are masked in what is stored too) and before validation, so the
event that is validated, spooled, sent and sealed in the audit chain holds references only.
The publisher builds one from its settings when a content store is configured
(:func:`protector_from_settings`) and has none otherwise: then publishing does not change and
costs nothing more.

A field goes by reference when its class is in the tenant's policy, when its JSON form is
larger than the claim-check size, or when it is text that would read as a reference. A
content store that fails refuses the event (``protect-failed``): an event is never sent with
the content the policy says must not travel inline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from runtrail.privacy.field_classes import CONTENT_FIELDS
from runtrail.privacy.policy import PrivacyPolicy
from runtrail.privacy.reference import as_reference, looks_like_reference
from runtrail.privacy.vault import ContentVault

if TYPE_CHECKING:
    from runtrail.config import Settings

Protector = Callable[[dict[str, Any]], dict[str, Any]]


@runtime_checkable
class Durable(Protocol):
    """A protector whose content becomes durable at :meth:`sync`: the publisher calls it in each
    group commit of its spool, before the spool's write, so an event on disk never refers to
    content that a power cut could lose."""

    def sync(self) -> None: ...


class ProtectFailed(Exception):
    """The content could not be stored; the event must not be sent."""


class ContentProtector:
    def __init__(self, vault: ContentVault, policy: PrivacyPolicy) -> None:
        self.vault = vault
        self.policy = policy
        # a string this long or shorter cannot exceed the claim check (6 bytes a character
        # at most in JSON: a \uXXXX escape), so it is not encoded just to be measured
        self._short = policy.claim_check_bytes // 6

    def __call__(self, form: dict[str, Any]) -> dict[str, Any]:
        fields = CONTENT_FIELDS.get(form.get("type"))  # type: ignore[arg-type]
        data = form.get("data")
        if not fields or not isinstance(data, dict):
            return form
        tenant = str(form.get("tenantId"))
        wanted = self.policy.for_tenant(tenant).by_reference
        replaced: dict[str, Any] = {}
        for name, field_class in fields.items():
            value = data.get(name)
            if value is None or as_reference(value) is not None:
                continue
            encoded = None
            if field_class not in wanted and not looks_like_reference(value):
                if type(value) is str and len(value) <= self._short:
                    continue
                encoded = orjson.dumps(value)
                if len(encoded) <= self.policy.claim_check_bytes:
                    continue
            try:
                ref = self.vault.put_json(
                    tenant,
                    self.policy.subject_of(form),
                    encoded if encoded is not None else orjson.dumps(value),
                )
            except Exception as exc:
                raise ProtectFailed(
                    f"cannot store {form.get('type')} {name} in the content store: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            replaced[name] = str(ref)
        if not replaced:
            return form
        return {**form, "data": {**data, **replaced}}

    def sync(self) -> None:
        """Make the content of every event protected so far durable (see :class:`Durable`)."""
        self.vault.sync()


def policy_from_settings(settings: Settings) -> PrivacyPolicy:
    return PrivacyPolicy.from_json(settings.privacy_policy)


def vault_from_settings(settings: Settings) -> ContentVault | None:
    """The content vault the settings configure; None without a content store."""
    if not settings.content_store_url:
        return None
    from runtrail.persistence.kinds import DATA_KEYS, PROTECTED_CONTENT
    from runtrail.persistence.registry import open_store

    keys_url = settings.key_store_url or (settings.state_dir / "keys").resolve().as_uri()
    content = open_store(PROTECTED_CONTENT, settings.content_store_url)
    return ContentVault(content, open_store(DATA_KEYS, keys_url))


def protector_from_settings(settings: Settings) -> Protector | None:
    """The publisher's hook, or None (nothing configured: publishing is unchanged)."""
    vault = vault_from_settings(settings)
    return None if vault is None else ContentProtector(vault, policy_from_settings(settings))
