"""The resume cache with prompts, outputs and tool arguments and results by reference, against a
real broker and ``runtrail run resume-cache``: the service keys entries by the plaintext an
agent's lookup hashes (so a resumed run finds its answers by content), the entries keep the
references, and the agent's cache opens them; once their content no longer opens, the service
serves no hit reading the erased marker: a model call is a miss, the run's tool call an
outcome unknown (never a silent second call)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runtrail.config import Settings
from runtrail.persistence import RESUME_ENTRIES, open_store
from runtrail.privacy.protect import vault_from_settings
from runtrail.privacy.reference import ERASED, PREFIX
from runtrail.privacy.resolve import Resolver
from runtrail.publisher import Publisher
from runtrail.resume import ResumeCache
from runtrail.resume.http_client import ServiceCacheClient
from tests.resume_support import TOKENS, CacheService, make_topics
from tests.support import wait_for

pytestmark = pytest.mark.kafka

SENTINEL = "SENTINEL-resume-77e1"
PROMPT = {"model": "m", "messages": [{"role": "user", "content": SENTINEL}]}


@dataclass
class ProtectedCacheService(CacheService):
    privacy: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {**super().env(), **self.privacy}


def test_lookups_by_content_find_entries_published_by_reference(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    events, cache_topic = make_topics(kafka_bootstrap)
    privacy = {
        "RUNTRAIL_CONTENT_STORE_URL": (tmp_path / "content").as_uri(),
        "RUNTRAIL_KEY_STORE_URL": (tmp_path / "keys").as_uri(),
    }
    service = ProtectedCacheService(
        kafka_bootstrap, events, cache_topic, tmp_path, privacy=privacy
    ).start()
    settings = Settings(
        bootstrap_servers=kafka_bootstrap,
        events_topic=events,
        tenant="acme",
        spool_dir=tmp_path / "spool",
        content_store_url=privacy["RUNTRAIL_CONTENT_STORE_URL"],
        key_store_url=privacy["RUNTRAIL_KEY_STORE_URL"],
        privacy_policy={"byReference": "all"},
    )
    try:
        with Publisher(settings) as publisher:
            run = [
                ("MODEL_REQUEST", {"prompt": PROMPT}),
                ("MODEL_RESPONSE", {"message": f"answer {SENTINEL}", "raw": {"id": 1}}),
                ("STEP_END", {"reason": "tool_use"}),
                ("TOOL_CALL", {"callId": "c1", "toolName": "lookup", "arguments": {"q": SENTINEL}}),
                ("TOOL_RESULT", {"callId": "c1", "toolName": "lookup", "output": [SENTINEL]}),
            ]
            for kind, data in run:
                assert publisher.publish(kind, "run-1", data, step=1)
            assert publisher.flush(60) == 0
            offsets = publisher.acked_offsets()
        vault = vault_from_settings(settings)
        assert vault is not None

        def lookup() -> tuple[Any, Any]:
            remote = ServiceCacheClient(service.url, TOKENS["acme"], wait_ms=30_000)
            cache = ResumeCache(
                "run-1",
                tenant="acme",
                remote=remote,
                read_your_writes=lambda: offsets,
                resolver=Resolver(vault),
            )
            model = cache.lookup_model(PROMPT)
            tool = cache.lookup_tool("lookup", {"q": SENTINEL})
            return model, tool

        model, tool = lookup()
        assert model is not None and model.message == f"answer {SENTINEL}"
        assert tool.entry is not None and tool.entry.result == [SENTINEL]
        store = open_store(RESUME_ENTRIES, service.store_url, readers=1)
        try:  # lookups may be answered before the service's store flush: wait for it
            wait_for(lambda: len(store.entries("acme")) == 2, 30, what="the stored entries")
            entries = [json.dumps(entry.to_json()) for entry in store.entries("acme")]
        finally:
            store.close()
        assert all(PREFIX in e and SENTINEL not in e for e in entries)

        vault.erase("acme", "run-1")  # the content only: the entries stay in the store
        model, tool = lookup()
        assert model is None  # never "[erased]" handed over as the model's answer
        assert tool.entry is None and tool.intent is not None  # the call's outcome: unknown
        assert tool.intent.call_id == "c1" and ERASED not in json.dumps(tool.intent.to_json())
    finally:
        service.stop()
