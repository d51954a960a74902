"""What every session-side store (snapshots, LangGraph checkpoint records) has besides its own methods:
a description for logs, and closing (also as a context manager)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self


class ClosableStore(ABC):
    """A store named for logs and closed when done."""

    @abstractmethod
    def describe(self) -> str:
        """Where the store is, fit for logs (no credentials)."""

    def close(self) -> None:  # noqa: B027  (optional hook)
        """Release connections."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
