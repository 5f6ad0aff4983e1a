"""A sink that keeps what the end-of-run summary shows (last values, counts, notices)."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from ..events import CheckpointEvent, Event, Metric, Notice
from .lastbest import LastBest

__all__ = ["StatsSink"]


class StatsSink:
    """Counts metrics and checkpoint announcements, and keeps each `Notice` code's first record
    (`notices`, in order; `on_notice` is called with it then, once per code, whichever rank's
    parser said it). Attached to every run, so a run that parsed nothing can say so:
    `keep_last=False` skips the per-metric work (the last value of each name) when no summary
    shows it, leaving one type check per event. With `keep_last`, `table` also keeps each metric's
    best value (`LastBest`: the summary's last/best table); `last_time` is the `wall_time` of the
    newest metric (what a health check asks: how long since the training said anything)."""

    name = "stats"

    def __init__(self, *, keep_last: bool = True, on_notice: Optional[Callable[[Notice], None]] = None) -> None:
        self.metrics = 0
        self.checkpoints = 0
        self.notices: dict[str, Notice] = {}
        self.table = LastBest()
        self.last_time: Optional[float] = None
        self._keep_last = keep_last
        self._on_notice = on_notice

    def write(self, events: Sequence[Event]) -> None:
        others = 0
        if self._keep_last:
            metrics = [ev for ev in events if type(ev) is Metric]
            self.table.add_all(metrics)
            for ev in events if len(metrics) < len(events) else ():
                if type(ev) is not Metric:
                    others += 1
                    self._other(ev)
        else:
            for ev in events:
                if type(ev) is not Metric:
                    others += 1
                    self._other(ev)
        if len(events) > others:
            self.metrics += len(events) - others
            self.last_time = events[-1].wall_time

    @property
    def last(self) -> dict[tuple[str, str], Metric]:
        """The last metric of each (phase, name) (`keep_last`): a completed value where there is one."""
        return self.table.last

    def _other(self, ev: Event) -> None:
        if isinstance(ev, CheckpointEvent):
            self.checkpoints += 1
        elif isinstance(ev, Notice) and ev.code not in self.notices:
            self.notices[ev.code] = ev
            if self._on_notice is not None:
                self._on_notice(ev)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
