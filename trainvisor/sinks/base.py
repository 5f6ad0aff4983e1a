"""The sink protocol: where parsed events go."""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from ..events import Event

__all__ = ["Sink"]


@runtime_checkable
class Sink(Protocol):
    """Receives events in order. An inline sink runs on the pipeline thread, so its `write` must
    not block for long; one that talks to the network is registered (or says `inline = False`)
    and runs on its own thread behind a bounded queue (`sinks/threaded.py`)."""

    name: str

    def write(self, events: Sequence[Event]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...
