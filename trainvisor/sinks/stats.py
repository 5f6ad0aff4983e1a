"""A sink that keeps what the end-of-run summary shows (last values, counts)."""
from __future__ import annotations

from typing import Sequence

from ..events import CheckpointEvent, Event, Metric

__all__ = ["StatsSink"]


class StatsSink:
    """Per-event work, so only attached when a summary is wanted."""

    name = "stats"

    def __init__(self) -> None:
        self.metrics = 0
        self.checkpoints = 0
        self.last: dict[tuple[str, str], Metric] = {}

    def write(self, events: Sequence[Event]) -> None:
        last = self.last
        for ev in events:
            if type(ev) is Metric:
                last[(ev.phase, ev.name)] = ev
                self.metrics += 1
            elif isinstance(ev, CheckpointEvent):
                self.checkpoints += 1

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
