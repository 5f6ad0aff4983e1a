"""A saved log's records as a test reads them: `replay_log(path)` is `trainvisor.replay` with
the events sorted by type and a series picked by name (`.series('loss', phase='train')`).

The records are the library's own (`Metric`, `CheckpointEvent`, `Notice`), not dicts: a test
asserts on what a sink receives."""
from __future__ import annotations

import functools
import gc
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence

from ..events import CheckpointEvent, Event, Metric, Notice

if TYPE_CHECKING:
    from ..stream.pipeline import PipelineStats

__all__ = ["Series", "Records", "ReplayedLog", "replay_log", "select_series"]


@dataclass(frozen=True)
class Series:
    """One metric's points in log order. `steps`: each point's iteration, or its epoch when the
    log counts no iterations (Keras, YOLO), or None."""

    name: str
    phase: Optional[str]
    points: tuple[Metric, ...]

    @property
    def values(self) -> list[float]:
        return [m.value for m in self.points]

    @property
    def steps(self) -> list[Optional[float]]:
        return [m.iteration if m.iteration is not None else m.epoch for m in self.points]

    def __len__(self) -> int:
        return len(self.points)


def select_series(events: Sequence[Event], name: str, phase: Optional[str] = None, *,
                  running: Optional[bool] = None, test_net: Optional[int] = None) -> Series:
    """The metrics called `name` (in `phase`, when given; running values or completed ones only,
    when `running` is given; of one Caffe test net, when `test_net` is given)."""
    points = tuple(e for e in events if type(e) is Metric and e.name == name
                   and (phase is None or e.phase == phase)
                   and (running is None or e.running == running)
                   and (test_net is None or e.test_net == test_net))
    return Series(name, phase, points)


class Records:
    """What both a replay and a supervised run offer: their events by type, and series."""

    events: tuple[Event, ...]

    @property
    def metrics(self) -> tuple[Metric, ...]:
        return tuple(e for e in self.events if type(e) is Metric)

    @property
    def checkpoints(self) -> tuple[CheckpointEvent, ...]:
        return tuple(e for e in self.events if type(e) is CheckpointEvent)

    @property
    def notices(self) -> tuple[Notice, ...]:
        return tuple(e for e in self.events if type(e) is Notice)

    def series_names(self) -> list[tuple[str, str]]:
        """Every (name, phase) the records hold, in order of first appearance."""
        return list(dict.fromkeys((m.name, m.phase) for m in self.metrics))

    def series(self, name: str, phase: Optional[str] = None, **filters: Any) -> Series:
        return select_series(self.events, name, phase, **filters)


@dataclass(frozen=True)
class ReplayedLog(Records):
    """A replayed log: its events in order, the pipeline's counts, the faults by component, and
    (`timeline`) the training's timeline: train batches, test passes, epoch ends, checkpoints,
    as a live run's callbacks get them (derived on first use: a test that reads only metrics of
    a large log does not pay for it)."""

    path: str
    events: tuple[Event, ...]
    stats: "PipelineStats"
    faults: Mapping[str, int]

    @functools.cached_property
    def timeline(self) -> tuple:
        from ..timeline import timeline_of

        return tuple(timeline_of(self.events))

    def epoch_ends(self) -> tuple:
        """The timeline's `epoch_end` events, in order."""
        return tuple(e for e in self.timeline if e.kind == "epoch_end")

    def test_ends(self) -> tuple:
        """The timeline's `test_end` events, in order."""
        return tuple(e for e in self.timeline if e.kind == "test_end")


def replay_log(path: "str | os.PathLike[str]", parser: str = "auto", rules: Optional[str] = None,
               **options: Any) -> ReplayedLog:
    """Replay the log at `path` in this process (`trainvisor.replay`'s options: year,
    iters_per_epoch, ranks, max_line_bytes, sinks, hooks)."""
    from ..calls.logs import replay

    with _collector_paused():
        done = replay(path, parser=parser, rules=rules, **options)
    return ReplayedLog(os.fspath(path), done.events, done.stats, done.faults)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The kept events are small tuples without reference cycles, a million of them for a
    1M-line log: each pass of the cyclic collector over the growing list would walk them all
    again (4x the replay's own time, bench/pytest_plugin.py). The command line tunes the
    collector for the whole process (cli._tune_gc); a test session's is left as it was after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
