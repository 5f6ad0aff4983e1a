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
    validation of best.pt after the last epoch's). A running val/test value (a validation
    progress bar) is part of no pass.
  - an **epoch** is every metric whose epoch rounds up to one number: a whole epoch is its own
    number (Keras 1, 2 ...; Lightning 0, 1 ...), a fraction counts towards the epoch it is in
    (Hugging Face's 0.22 is in epoch 1, and 1.0 ends it). It ends at the first metric of another
    epoch (the next one begun; a number that goes back is a new training in the same log), or
    when the stream ends, or, once the stream has shown that its epochs end with their
    validation, when its validation pass is complete (below). Its values are the last completed
    value of each `phase/name`; a value of an epoch that has ended is late: in no epoch_end.
  - **an epoch ends with its validation** when the epoch before it did: exactly one pass, its
    last completed values, each name once (no progress lines). Then a pass of the same phase and
    test net that holds every name of that pass is complete, and its epoch with it, as soon as
    the line it ends on is (the next record is on another line, or the pipeline's batch ends; a
    line's records are never split between batches, so a replay and a live run agree). Without
    that, a pass is known to have ended only when the next record comes, which is the next
    epoch's; and a stream whose epochs hold several passes (Gluon's `[Epoch 0][Batch 50] ...
    val_AP=` on every batch line) or values after their pass (Caffe's iteration after its test)
    never learns it.
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

    __slots__ = ("key", "values", "last", "running", "progress")

    def __init__(self, key: tuple, m: Metric) -> None:
        self.key, self.values, self.last, self.running, self.progress = key, {}, m, False, False

    def add(self, m: Metric) -> None:
        if m.name in self.values:
            self.progress = True  # a name again on the next line (a test pass's progress lines)
        self.values[m.name] = m.value
        self.last = m
        self.running = self.running or m.running


class _Epoch:
    __slots__ = ("number", "values", "last", "passes", "shape", "test_last")

    def __init__(self, number: int, m: Metric) -> None:
        self.number, self.values, self.last = number, {}, m
        self.passes = 0
        self.shape: Optional[tuple] = None  # (phase, test_net, names) of its last pass, if it had no progress
        self.test_last = False  # its last completed value was a test pass's


class _RankTimeline:
    """One rank's open batch, test pass and epoch."""

    def __init__(self) -> None:
        self.batch: Optional[_Group] = None
        self.test: Optional[_Group] = None
        self.epoch: Optional[_Epoch] = None
        self.learned: Optional[tuple] = None  # the pass an epoch ends with, once the stream showed it
        self.ended: Optional[int] = None  # an epoch ended with its pass: its later values are late
        self.late = 0

    def moved_to(self, stream: str, line: int, out: list) -> None:
        """A record on `stream`'s `line` came: the open pass's line is complete if it was another."""
        t = self.test
        if t is not None and (line != t.last.line or stream != t.last.stream):
            self.settle(out)

    def feed(self, m: Metric, out: list) -> None:
        self.moved_to(m.stream, m.line, out)
        self._close_groups(m, out)
        if m.epoch is not None:
            number = epoch_number(m.epoch)
            if self.epoch is None and number == self.ended:
                self.late += not m.running
            else:
                self._enter_epoch(number, m, out)
        if m.phase == _TRAIN:
            if m.iteration is not None:
                if self.batch is None:
                    self.batch = _Group((m.iteration,), m)
                self.batch.add(m)
        elif not m.running:
            if self.test is None:
                self.test = _Group((m.phase, m.test_net, m.epoch, m.iteration), m)
            self.test.add(m)
        ep = self.epoch
        if ep is not None and m.epoch is not None and not m.running:
            ep.values[m.phase + "/" + m.name] = m.value
            ep.last = m
            ep.test_last = m.phase != _TRAIN

    def settle(self, out: list) -> None:
        """End the open pass and its epoch if the stream showed its epochs end with such a pass
        and this one holds all of that pass's names (called when the pass's line is complete)."""
        t, ep, learned = self.test, self.epoch, self.learned
        if t is None or ep is None or learned is None or t.key[2] is None:
            return
        if t.key[:2] == learned[0] and learned[1] <= t.values.keys() and epoch_number(t.key[2]) == ep.number:
            self._end_test(out)
            self._end_epoch(out, with_pass=True)

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
        self.epoch, self.ended = _Epoch(number, m), None

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
        ep = self.epoch
        if ep is not None and epoch is not None and epoch_number(epoch) == ep.number:
            ep.passes += 1
            ep.shape = None if t.progress else ((phase, test_net), frozenset(t.values))

    def _end_epoch(self, out: list, with_pass: bool = False) -> None:
        ep, self.epoch = self.epoch, None
        m = ep.last
        out.append(EpochEnd(ep.number, m.iteration, frozen_values(ep.values), m.line, m.stream, m.rank, m.wall_time))
        if with_pass:
            self.ended = ep.number
        else:  # what this epoch shows is what the next ones will do
            self.learned = ep.shape if ep.passes == 1 and ep.test_last else None

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
                for rank in self._ranks.values():  # in the order of the lines, however they were batched
                    rank.moved_to(ev.stream, ev.line, out)
                self._announced(ev, out)
        for rank in self._ranks.values():  # the batch ends with complete lines
            rank.settle(out)
        return out

    @property
    def late_values(self) -> int:
        """Completed values that came after their epoch had ended with its pass (in no epoch_end)."""
        return sum(r.late for r in self._ranks.values())

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
