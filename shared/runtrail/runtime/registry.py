"""Which services ``runtrail run NAME`` knows, imported lazily so each pulls only its own deps."""

from __future__ import annotations

import importlib

from runtrail.runtime.service import Service

#: service name -> "module:ClassName"
SERVICES: dict[str, str] = {
    "noop": "runtrail_services.noop.service:NoopService",
    "audit": "runtrail_services.audit.service:AuditService",
    "capture": "runtrail_services.capture.service:CaptureService",
    "sessions": "runtrail_services.sessions.service:SessionsService",
    "resume-cache": "runtrail_services.resume_cache.service:ResumeCacheService",
    "projector": "runtrail_services.projector.service:ProjectorService",
}

#: services of topics that hold no runtrail events (raw services), run like the others; not in
#: the dev stack and the deploy manifests, which do not run otlp-ingest either
RAW_SERVICES: dict[str, str] = {
    "otlp-mapper": "runtrail_services.otlp_ingest.mapper:OtlpMapperService",
}

#: receivers: not topic consumers (an HTTP server feeding the publisher), run by their own path
RECEIVERS: dict[str, str] = {
    "otlp-ingest": "runtrail_services.otlp_ingest.service:OtlpIngestReceiver",
    "outbox-relay": "runtrail_services.outbox_relay.service:OutboxRelayReceiver",
    "command-api": "runtrail_services.command_api.service:CommandApiReceiver",
}


class UnknownService(LookupError):
    pass


def service_class(name: str) -> type[Service]:
    try:
        target = {**SERVICES, **RAW_SERVICES}[name]
    except KeyError:
        known = ", ".join(sorted({**SERVICES, **RAW_SERVICES}))
        raise UnknownService(f"unknown service {name!r} (known: {known})") from None
    module_name, _, attr = target.partition(":")
    cls: type[Service] = getattr(importlib.import_module(module_name), attr)
    return cls
