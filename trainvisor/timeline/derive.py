"""The training's timeline derived from the metric stream: `Metric` / `CheckpointEvent` in,
`BatchEnd`, `TestEnd`, `EpochEnd`, `CheckpointReached` out. Pure: no thread, no clock, no
knowledge of which parser wrote the stream; the same events for a live run and a replay.

What marks what (docs/timeline.md has the table per format):
  - a **batch** is the train values logged at one iteration: consecutive train metrics with
    that iteration. It ends at the first metric that is not one of them (another iteration, a
    name seen again, a val/test value, a train value without an iteration).
  - a **test pass** is consecutive completed (not running) val/test metrics with one phase, test
    net, epoch and iteration. It ends at the first metric that is not one of them. A name seen
    again on the next line is the pass's progress (its later value stands: DETR's `Test: [i/N]`
    lines); seen again after other lines, it starts a new pass at the same point (YOLOv5's
    validation of best.pt after the last epoch's). A running val/test value (a validation progress bar) is part
    of no pass.
  - an **epoch** is every metric whose epoch rounds up to one number: a whole epoch is its own
    number (Keras 1, 2 ...; Lightning 0, 1 ...), a fraction counts towards the epoch it is in
    (Hugging Face's 0.22 is in epoch 1, and 1.0 ends it). It ends at the first metric of another
    epoch (the next one begun; a number that goes back is a new training in the same log), or
    when the stream ends. Its values are the last completed value of each `phase/name`.
    Why not end it when its validation pass ends? A pass is known to have ended only when the
    next metric comes, which is the next epoch's in every log we have; and in some a validation
    value at a whole epoch is not the epoch's last (Gluon's `[Epoch 0][Batch 50] ... val_AP=`).
  - announced checkpoints: consecutive `CheckpointEvent`s with one iteration and epoch (Caffe's
    weights and solver state) are one checkpoint.
Whatever is open when the stream ends is complete then: `finish()` gives it. Each rank
(a launcher's prefix) has a timeline of its own; the events say their rank.
"""
from __future__ import annotations

import math
import os
from typing import Iterable, Optional

from ..events import CheckpointEvent, Metric
from .events import BatchEnd, CheckpointReached, EpochEnd, TestEnd, TimelineEvent, frozen_values

__all__ = ["Timeline", "epoch_number", "timeline_of"]

_TRAIN = "train"


def epoch_number(epoch: float) -> int:
    """The epoch a value belongs to: a whole number is itself, a fraction the epoch it is in."""
    return math.ceil(epoch - 1e-9)


def _next_line(last: Metric, m: Metric) -> bool:
    """`m` is on `last`'s line or the one after it, in the same stream."""
    return m.stream == last.stream and 0 <= m.line - last.line <= 1


class _Group:
    """Values gathered under one key until something that is not part of them arrives."""

    __slots__ = ("key", "values", "last", "running")

    def __init__(self, key: tuple, m: Metric) -> None:
        self.key, self.values, self.last, self.running = key, {}, m, False

    def add(self, m: Metric) -> None:
        self.values[m.name] = m.value
        self.last = m
        self.running = self.running or m.running


class _Epoch:
    __slots__ = ("number", "values", "last")

    def __init__(self, number: int, m: Metric) -> None:
        self.number, self.values, self.last = number, {}, m


class _RankTimeline:
    """One rank's open batch, test pass and epoch."""

    def __init__(self) -> None:
        self.batch: Optional[_Group] = None
        self.test: Optional[_Group] = None
        self.epoch: Optional[_Epoch] = None

    def feed(self, m: Metric, out: list) -> None:
        self._close_groups(m, out)
        if m.epoch is not None:
            self._enter_epoch(epoch_number(m.epoch), m, out)
        if m.phase == _TRAIN:
            if m.iteration is not None:
                if self.batch is None:
                    self.batch = _Group((m.iteration,), m)
                self.batch.add(m)
        elif not m.running:
            if self.test is None:
                self.test = _Group((m.phase, m.test_net, m.epoch, m.iteration), m)
            self.test.add(m)
        if m.epoch is not None and not m.running:
            ep = self.epoch
            ep.values[m.phase + "/" + m.name] = m.value
            ep.last = m

    def _close_groups(self, m: Metric, out: list) -> None:
        """End the batch and the test pass `m` is not part of."""
        b = self.batch
        if b is not None and (m.phase != _TRAIN or b.key != (m.iteration,) or m.name in b.values):
            self._end_batch(out)
        t = self.test
        if t is not None and not (m.running and m.phase != _TRAIN):
            if m.phase == _TRAIN or t.key != (m.phase, m.test_net, m.epoch, m.iteration) or (
                    m.name in t.values and not _next_line(t.last, m)):
                self._end_test(out)

    def _enter_epoch(self, number: int, m: Metric, out: list) -> None:
        ep = self.epoch
        if ep is not None and ep.number == number:
            return
        if ep is not None:
            self._end_epoch(out)
        self.epoch = _Epoch(number, m)

    def _end_batch(self, out: list) -> None:
        b, self.batch = self.batch, None
        m = b.last
        out.append(BatchEnd(b.key[0], m.epoch, frozen_values(b.values), b.running, m.line, m.stream, m.rank,
                            m.wall_time))

    def _end_test(self, out: list) -> None:
        t, self.test = self.test, None
        m = t.last
        phase, test_net, epoch, iteration = t.key
        out.append(TestEnd(phase, test_net, epoch, iteration, frozen_values(t.values), m.line, m.stream, m.rank,
                           m.wall_time))

    def _end_epoch(self, out: list) -> None:
        ep, self.epoch = self.epoch, None
        m = ep.last
        out.append(EpochEnd(ep.number, m.iteration, frozen_values(ep.values), m.line, m.stream, m.rank, m.wall_time))

    def finish(self, out: list) -> None:
        if self.batch is not None:
            self._end_batch(out)
        if self.test is not None:
            self._end_test(out)
        if self.epoch is not None:
            self._end_epoch(out)


class Timeline:
    """Feed it the pipeline's events as they come (`feed`), then `finish()` once at the end.
    Each returns the timeline events completed by what it was given, in order."""

    def __init__(self) -> None:
        self._ranks: dict[Optional[int], _RankTimeline] = {}
        self._checkpoint: Optional[tuple[tuple, list[str], CheckpointEvent]] = None

    def feed(self, events: Iterable[object]) -> list[TimelineEvent]:
        out: list[TimelineEvent] = []
        for ev in events:
            if type(ev) is Metric:
                if self._checkpoint is not None:
                    self._end_checkpoint(out)
                rank = self._ranks.get(ev.rank)
                if rank is None:
                    rank = self._ranks[ev.rank] = _RankTimeline()
                rank.feed(ev, out)
            elif type(ev) is CheckpointEvent:
                self._announced(ev, out)
        return out

    def finish(self) -> list[TimelineEvent]:
        out: list[TimelineEvent] = []
        for rank in self._ranks.values():
            rank.finish(out)
        if self._checkpoint is not None:
            self._end_checkpoint(out)
        return out

    def _announced(self, ev: CheckpointEvent, out: list) -> None:
        key = (ev.iteration, ev.epoch)
        if self._checkpoint is not None and (self._checkpoint[0] != key or ev.path in self._checkpoint[1]):
            self._end_checkpoint(out)
        if self._checkpoint is None:
            self._checkpoint = (key, [], ev)
        self._checkpoint[1].append(ev.path)

    def _end_checkpoint(self, out: list) -> None:
        (iteration, epoch), paths, first = self._checkpoint
        self._checkpoint = None
        name = os.path.splitext(os.path.basename(paths[0].rstrip("/")))[0]
        out.append(CheckpointReached("announced", name, tuple(paths), iteration, epoch, first.wall_time))


def timeline_of(events: Iterable[object]) -> list[TimelineEvent]:
    """The whole timeline of a finished stream (a replay's `events`), for a test or a report."""
    timeline = Timeline()
    return timeline.feed(events) + timeline.finish()
