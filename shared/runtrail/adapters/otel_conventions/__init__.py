"""The GenAI tracing conventions users' instrumentations speak, each read as the OTel GenAI one.

Why: one mapping (:mod:`runtrail.adapters.otel_mapping`) turns spans into runtime events, and it
reads the OpenTelemetry GenAI semantic conventions. Instrumentations maintained by others speak
other dialects (OpenInference, OpenLLMetry/traceloop); each has a module here with one table
from its attributes to the GenAI ones, so a span is translated once, on the way in, and every
convention gets the same events, ordering, grouping and drop accounting.

A convention module has ``NAME`` (for counts and docs), ``claims(span) -> bool`` (the span is in
this convention and not already in the GenAI one) and ``as_genai(span) -> SpanView``. The first
module that claims a span translates it; a span no module claims is read as it is.
"""

from __future__ import annotations

import importlib
import json
from functools import cache
from types import ModuleType
from typing import Any

from runtrail.adapters.otel_spans import SpanView

#: the modules of this package, tried in this order
CONVENTIONS: tuple[str, ...] = ("openinference", "openllmetry")


@cache
def _modules() -> tuple[ModuleType, ...]:
    return tuple(importlib.import_module(f"{__name__}.{name}") for name in CONVENTIONS)


def as_genai(span: SpanView) -> SpanView:
    """``span`` in the GenAI semantic conventions (itself when it already is, or no convention
    claims it)."""
    for module in _modules():
        if module.claims(span):
            translated: SpanView = module.as_genai(span)
            return translated
    return span


def json_text(value: Any) -> Any:
    """A value the convention documents as JSON text, parsed (left as it is when it is not
    JSON): the one place a convention turns text into structure."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value
