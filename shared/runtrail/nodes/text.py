"""How a MODEL node's text accumulates, exactly as ai4j's ``IoCaptureAgentListener`` does.

``outputText`` concatenates the deltas; reasoning segments are joined by a newline. An empty
piece is not a segment: ``""`` then ``"x"`` gives ``"x"``, never ``"\\nx"``.
"""

from __future__ import annotations


def append_text(text: str, piece: str | None) -> str:
    """``outputText`` after one more response delta (None and "" add nothing)."""
    if not piece:
        return text
    return piece if not text else text + piece


def append_reasoning(text: str, piece: str | None) -> str:
    """``reasoningText`` after one more segment: newline-joined, empty segments skipped."""
    if not piece:
        return text
    return piece if not text else text + "\n" + piece
