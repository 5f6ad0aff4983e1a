"""TensorBoard sink: the run's metrics as scalar event files that TensorBoard reads.

The event files are written by tensorboardX (a maintained writer, never a hand-made record
format), through `tb_events.EventFile`: only its record writer and protocol buffers are imported
(the package's `__init__` would load torch), on the sink's own thread at its first write, so a run
that names the sink starts as fast as one that does not; only the package's presence is checked
before the child starts. The values of one step read in one batch go into one event (a Caffe
iteration's loss, lr and speed): a third of the records, the same scalars.

The naming, documented in README's "Sinks" section:

- tag `PHASE/NAME` (`train/loss`, `val/accuracy`); a Caffe test net other than the first (its
  `test_net` is 1, 2...) is its own phase, `test1/accuracy`, so the common single net keeps the
  plain `test/...` tag;
- step: the metric's iteration; its epoch where it has none (rounded down when fractional); the
  number of values its tag had before where it has neither;
- rank: `train/loss/rank1` once more than one rank has been seen. The first ranked records wait
  for a second rank (at most `rank_wait` records, and at most `rank_wait_seconds`, checked when
  the sink is flushed: the run flushes it every second), so a two-rank run has no untagged
  rank-0 curve and a run reporting one rank (`--ranks 0`, the default) shows its values within
  that time; a rank first seen after that is tagged, the rank seen alone before keeps its tags;
- running values (a progress bar's postfix, a Keras step line: mid-epoch) go under their own
  section, `running/train/loss`: their steps are not the epoch curve's, and mixed into one tag
  they would draw a saw-tooth between a batch's value and the epoch's;
- NaN and infinities are written as they are: TensorBoard shows them, and a loss that diverged
  is what a reader of the curve must see, not a gap;
- characters TensorBoard's writers do not keep in a tag (anything but letters, digits, `_`,
  `-`, `.`, `/`) become `_` (`box_proposals/AR@100` -> `val/box_proposals/AR_100`).

TensorBoard stores a scalar as a 32-bit float: a value reads back as its nearest float32.
"""
from __future__ import annotations

import importlib.util
import math
import os
import re
import time
from typing import Any, Callable, Optional, Sequence

from ..errors import ConfigError
from ..events import Metric

__all__ = ["TensorBoardSink", "scalar_tag", "scalar_step"]

_UNSAFE = re.compile(r"[^-/\w.]")
DEFAULT_RANK_WAIT = 1000
DEFAULT_RANK_WAIT_SECONDS = 30.0


def scalar_tag(m: Metric, with_rank: bool) -> str:
    """The tag `m` is written under (see the module's docstring)."""
    phase = m.phase if not m.test_net else f"{m.phase}{m.test_net}"
    tag = f"{phase}/{m.name}"
    if m.running:
        tag = "running/" + tag
    if with_rank and m.rank is not None:
        tag = f"{tag}/rank{m.rank}"
    return _UNSAFE.sub("_", tag)


def scalar_step(m: Metric) -> Optional[int]:
    """The iteration, else the epoch rounded down; None when the metric has neither."""
    if m.iteration is not None:
        return int(m.iteration)
    if m.epoch is not None and math.isfinite(m.epoch):
        return int(math.floor(m.epoch))
    return None


class TensorBoardSink:
    """Writes every Metric it is given as one scalar; other events are not scalars and are
    skipped. Not thread-safe: the registry runs it on a thread of its own (not inline)."""

    name = "tensorboard"

    def __init__(self, dir: str, *, rank_wait: int = DEFAULT_RANK_WAIT,
                 rank_wait_seconds: float = DEFAULT_RANK_WAIT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if importlib.util.find_spec("tensorboardX") is None:
            raise ConfigError("sink 'tensorboard' needs the tensorboardX package: pip install tensorboardX")
        self.dir = os.fspath(dir)
        os.makedirs(self.dir, exist_ok=True)  # an unwritable dir is the user's to fix, before the child starts
        self.rank_wait = int(rank_wait)
        self.rank_wait_seconds = float(rank_wait_seconds)
        self._clock = clock
        self._held_since = 0.0
        self._writer: Any = None  # a tb_events.EventFile, opened at the first value
        self._step: Optional[tuple[int, float]] = None  # the (step, wall time) of the values in _values
        self._values: list[tuple[str, float]] = []  # one event's scalars, not yet written
        self._ranks: set[int] = set()
        self._held: list[Metric] = []  # ranked records waiting for a second rank
        self._decided = False  # whether the first ranks' tags are settled
        self._plain: frozenset = frozenset()  # the one rank settled untagged, when it was alone
        self._counts: dict[str, int] = {}  # values per tag, for metrics without a step
        self._closed = False

    def write(self, events: Sequence[object]) -> None:
        for m in events:
            if type(m) is not Metric:
                continue
            if m.rank is not None:
                self._ranks.add(m.rank)
                if not self._decided:
                    self._hold(m)
                    continue
            self._add(m)
        self._write_event()

    def flush(self) -> None:
        if self._held and self._clock() - self._held_since >= self.rank_wait_seconds:
            self._release()
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._release()
        if self._writer is not None:
            self._writer.close()

    # -- ranks ------------------------------------------------------------------------------
    def _hold(self, m: Metric) -> None:
        if not self._held:
            self._held_since = self._clock()
        self._held.append(m)
        if len(self._ranks) > 1 or len(self._held) >= self.rank_wait:
            self._release()

    def _release(self) -> None:
        """Settle the tags of the ranks seen so far and write what waited."""
        self._decided = True
        if len(self._ranks) == 1:
            self._plain = frozenset(self._ranks)
        held, self._held = self._held, []
        for m in held:
            self._add(m)
        self._write_event()

    # -- writing ----------------------------------------------------------------------------
    def _add(self, m: Metric) -> None:
        tag = scalar_tag(m, len(self._ranks) > 1 and m.rank not in self._plain)
        step = scalar_step(m)
        if step is None:
            step = self._counts.get(tag, 0)
        self._counts[tag] = self._counts.get(tag, 0) + 1
        # Scalars built here, not by SummaryWriter.add_scalar: that one goes through numpy and
        # logs a warning for each NaN, thousands of lines into the run log for a diverged loss.
        key = (step, m.wall_time)
        if key != self._step or any(t == tag for t, _ in self._values):
            self._write_event()
            self._step = key
        self._values.append((tag, float(m.value)))

    def _write_event(self) -> None:
        """The scalars gathered for one (step, wall time), as one event."""
        if not self._values:
            return
        if self._writer is None:  # here, on the sink's thread: see the module's docstring
            from .tb_events import EventFile

            self._writer = EventFile(self.dir)
        step, wall_time = self._step  # type: ignore[misc]
        values, self._values = self._values, []
        self._writer.scalars(step, wall_time, values)
