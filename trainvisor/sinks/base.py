"""The sink protocol: where parsed events go."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from ..events import Event

__all__ = ["Sink", "SinkContext"]


@runtime_checkable
class Sink(Protocol):
    """Receives events in order. An inline sink runs on the pipeline thread, so its `write` must
    not block for long; one that talks to the network is registered (or says `inline = False`)
    and runs on its own thread behind a bounded queue (`sinks/threaded.py`)."""

    name: str

    def write(self, events: Sequence[Event]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class SinkContext:
    """What a run tells the factories that ask for it (a `context` parameter): its id, its
    directory and its configuration as plain data with secrets masked (`config.convert.to_dict`).
    Plain data, so a sink needs nothing of config/ to read it."""

    run_id: str = ""
    run_dir: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    attempt: int = 1  # the starts on the run directory: above 1, a sink may continue what it began
