"""What goes by reference: a policy per tenant and field class, and the claim-check size.

Given as JSON (``RUNTRAIL_PRIVACY_POLICY``)::

    {"byReference": ["prompts", "tool_results"], "subject": "run",
     "claimCheckBytes": 1048576,
     "tenants": {"acme": {"byReference": "all", "subject": "actor"}}}

``byReference`` lists field classes (:class:`~runtrail.privacy.field_classes.FieldClass`) or
says ``"all"``; a tenant's entry replaces the default for that tenant. ``subject`` names whose
data key seals the content, and so what one erasure destroys: ``run`` (the default), ``session``
(the session ID, else the run) or ``actor`` (the actor's ID: an end user). Content whose JSON
form is larger than ``claimCheckBytes`` goes by reference whatever the class says, so a large
tool result never meets the event size limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from runtrail.privacy.field_classes import FieldClass

Subject = Literal["run", "session", "actor"]
SUBJECTS: tuple[Subject, ...] = ("run", "session", "actor")

#: Content larger than this (its JSON form, in bytes) always goes by reference.
DEFAULT_CLAIM_CHECK_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    by_reference: frozenset[FieldClass] = frozenset()
    subject: Subject = "run"

    @classmethod
    def from_json(cls, value: Mapping[str, Any], where: str) -> TenantPolicy:
        unknown = sorted(set(value) - {"byReference", "subject", "tenants", "claimCheckBytes"})
        if unknown:
            raise ValueError(f"{where}: unknown privacy policy key(s) {unknown}")
        classes = value.get("byReference", [])
        if classes == "all":
            chosen = frozenset(FieldClass)
        else:
            try:
                chosen = frozenset(FieldClass(name) for name in classes)
            except ValueError as exc:
                known = ", ".join(c.value for c in FieldClass)
                raise ValueError(f"{where}: {exc} (known classes: {known}, or all)") from None
        subject = value.get("subject", "run")
        if subject not in SUBJECTS:
            raise ValueError(f"{where}: subject is one of {', '.join(SUBJECTS)}, not {subject!r}")
        return cls(chosen, subject)


@dataclass(frozen=True, slots=True)
class PrivacyPolicy:
    default: TenantPolicy = TenantPolicy()
    tenants: Mapping[str, TenantPolicy] = field(default_factory=dict)
    claim_check_bytes: int = DEFAULT_CLAIM_CHECK_BYTES

    def for_tenant(self, tenant: str) -> TenantPolicy:
        return self.tenants.get(tenant, self.default)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> PrivacyPolicy:
        tenants = value.get("tenants", {})
        if not isinstance(tenants, Mapping):
            raise ValueError("privacy policy: tenants is an object tenant -> policy")
        limit = int(value.get("claimCheckBytes", DEFAULT_CLAIM_CHECK_BYTES))
        if limit < 1:
            raise ValueError("privacy policy: claimCheckBytes must be positive")
        return cls(
            TenantPolicy.from_json(value, "privacy policy"),
            {
                t: TenantPolicy.from_json(p, f"privacy policy of tenant {t!r}")
                for t, p in tenants.items()
            },
            limit,
        )

    def subject_of(self, form: Mapping[str, Any]) -> str:
        """The data subject of an event's JSON form, as its tenant's policy names it."""
        run_id = str(form["runId"])
        chosen = self.for_tenant(str(form.get("tenantId"))).subject
        if chosen == "session":
            return str(form.get("sessionId") or run_id)
        if chosen == "actor":
            actor = form.get("actor")
            found = actor.get("id") if isinstance(actor, Mapping) else None
            return str(found) if found else run_id
        return run_id
