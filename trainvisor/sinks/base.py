"""The sink protocol: where parsed events go."""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from ..events import Event

__all__ = ["Sink"]


@runtime_checkable
class Sink(Protocol):
    """Receives events in order on the pipeline thread. `write` must not block
    for long: a sink that talks to the network queues and sends on its own thread."""

    name: str

    def write(self, events: Sequence[Event]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...
