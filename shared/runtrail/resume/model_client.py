"""``ResumableModelClient``: wraps the agent's model client with the resume cache (seed 000 §3.2).

``create``: a hit returns the recorded result and does not call the delegate; a miss calls it,
publishes the request and response (with a recorder) and records the result. An errored call
is never recorded.

**The streaming trap (seed 000 §3.4).** ``create_stream`` consults the cache too, and on a hit
returns the *terminal* result at once **without re-emitting any delta to ``on_delta``**.
Resume is aimed at the non-streaming path: a listener that depends on token-by-token deltas gets
nothing for a replayed node, only the returned result. Don't expect resume to replay a stream.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any, Protocol

from runtrail.resume.cache import ResumeCache
from runtrail.resume.entry import ModelResult
from runtrail.resume.recorder import RunRecorder
from runtrail.resume.wrapper import CachedDelegate

log = logging.getLogger(__name__)

DeltaListener = Callable[[str], None]


class ModelClient(Protocol):
    """The agent's real model client."""

    def create(self, prompt: Any) -> ModelResult: ...


class StreamingModelClient(ModelClient, Protocol):
    """A model client that can stream deltas to a listener and return the terminal result."""

    def create_stream(self, prompt: Any, on_delta: DeltaListener) -> ModelResult: ...


class ResumableModelClient(CachedDelegate[ModelClient]):
    """See the module docstring."""

    def __init__(
        self,
        delegate: ModelClient,
        cache: ResumeCache,
        *,
        recorder: RunRecorder | None = None,
    ) -> None:
        super().__init__(delegate, cache, recorder)
        self._attempts = itertools.count(1)

    def create(self, prompt: Any) -> ModelResult:
        """The recorded result on a hit (delegate not called); else a real, recorded call."""
        hit = self.cache.lookup_model(prompt)
        if hit is not None:
            return hit
        if self.recorder is not None:
            self.recorder.model_request(prompt)
        result = self.delegate.create(prompt)  # raises: nothing recorded
        if self.recorder is not None:
            self.recorder.model_response(result.message, result.raw)
        step, turn = self._coordinates()
        self.cache.record_model(prompt, result, step=step, turn_id=turn)
        return result

    def create_stream(self, prompt: Any, on_delta: DeltaListener) -> ModelResult:
        """Like :meth:`create`, streaming deltas to ``on_delta`` on a miss only.

        On a hit the terminal result is returned and ``on_delta`` is **not** called (the
        streaming trap, seed 000 §3.4).
        """
        hit = self.cache.lookup_model(prompt)
        if hit is not None:
            return hit
        stream = getattr(self.delegate, "create_stream", None)
        if stream is None:
            raise TypeError(f"{type(self.delegate).__name__} has no create_stream")
        recorder = self.recorder
        deltas: list[str] = []

        def forward(delta: str) -> None:
            deltas.append(delta)
            if recorder is not None:
                recorder.model_response(delta, None)
            on_delta(delta)

        if recorder is not None:
            recorder.model_request(prompt)
        try:
            result: ModelResult = stream(prompt, forward)
        except Exception as exc:
            if recorder is not None and deltas:
                recorder.model_failed(next(self._attempts), f"{type(exc).__name__}: {exc}")
            raise
        if recorder is not None and result.raw is not None:
            recorder.model_response(None, result.raw)
        text = "".join(deltas) if deltas else result.message
        recorded = ModelResult(message=text, raw=result.raw)
        step, turn = self._coordinates()
        self.cache.record_model(prompt, recorded, step=step, turn_id=turn)
        return result
