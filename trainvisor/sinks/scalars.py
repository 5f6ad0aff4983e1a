"""How a metric becomes a named scalar with a step, for the sinks that draw curves (TensorBoard,
MLflow): one rule, so a run looks the same in either, documented in README's "Sinks" section.

- name `PHASE/NAME` (`train/loss`, `val/accuracy`); a Caffe test net other than the first (its
  `test_net` is 1, 2...) is its own phase, `test1/accuracy`, so the common single net keeps the
  plain `test/...` name;
- step: the metric's iteration; its epoch where it has none (rounded down when fractional); the
  number of values its name had before where it has neither;
- rank: `train/loss/rank1` once more than one rank has been seen. The first ranked records wait
  for a second rank (at most `rank_wait` records, and at most `rank_wait_seconds`, checked at
  each `tick`: the run flushes its sinks every second), so a two-rank run has no unranked rank-0
  curve and a run reporting one rank (`--ranks 0`, the default) shows its values within that
  time; a rank first seen after that is named, the rank seen alone before keeps its names;
- running values (a progress bar's postfix, a Keras step line: mid-epoch) go under their own
  section, `running/train/loss`: their steps are not the epoch curve's, and mixed into one curve
  they would draw a saw-tooth between a batch's value and the epoch's;
- characters outside letters, digits, `_`, `-`, `.`, `/` become `_` (`box_proposals/AR@100` ->
  `val/box_proposals/AR_100`): both TensorBoard and MLflow keep those.
"""
from __future__ import annotations

import math
import re
import time
from typing import Callable, Optional

from ..events import Metric

__all__ = ["ScalarNamer", "scalar_tag", "scalar_step", "DEFAULT_RANK_WAIT", "DEFAULT_RANK_WAIT_SECONDS"]

_UNSAFE = re.compile(r"[^-/\w.]")
DEFAULT_RANK_WAIT = 1000
DEFAULT_RANK_WAIT_SECONDS = 30.0

Emit = Callable[[str, int, Metric], None]
Tag = Callable[[Metric, bool], str]


def scalar_tag(m: Metric, with_rank: bool) -> str:
    """The name `m` is written under (see the module's docstring)."""
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


class ScalarNamer:
    """Names and steps every metric it is given and hands each to `emit(tag, step, metric)`, in
    order, holding ranked records back until their names are settled (see the module's
    docstring). `tag(metric, with_rank)` makes a name (`scalar_tag`, or a sink's variant of it).
    Not thread-safe: it lives on its sink's thread."""

    def __init__(self, emit: Emit, *, rank_wait: int = DEFAULT_RANK_WAIT,
                 rank_wait_seconds: float = DEFAULT_RANK_WAIT_SECONDS,
                 clock: Callable[[], float] = time.monotonic, tag: Tag = scalar_tag) -> None:
        self._emit = emit
        self._tag = tag
        self.rank_wait = int(rank_wait)
        self.rank_wait_seconds = float(rank_wait_seconds)
        self._clock = clock
        self._held_since = 0.0
        self._ranks: set[int] = set()
        self._held: list[Metric] = []  # ranked records waiting for a second rank
        self._decided = False  # whether the first ranks' names are settled
        self._plain: frozenset = frozenset()  # the one rank settled unranked, when it was alone
        self._counts: dict[str, int] = {}  # values per name, for metrics without a step

    def add(self, m: Metric) -> None:
        if m.rank is not None:
            self._ranks.add(m.rank)
            if not self._decided:
                self._hold(m)
                return
        self._name(m)

    def tick(self) -> None:
        """Release the held records once they have waited `rank_wait_seconds`."""
        if self._held and self._clock() - self._held_since >= self.rank_wait_seconds:
            self.release()

    def release(self) -> None:
        """Settle the names of the ranks seen so far and emit what waited (also at the end)."""
        self._decided = True
        if len(self._ranks) == 1:
            self._plain = frozenset(self._ranks)
        held, self._held = self._held, []
        for m in held:
            self._name(m)

    def _hold(self, m: Metric) -> None:
        if not self._held:
            self._held_since = self._clock()
        self._held.append(m)
        if len(self._ranks) > 1 or len(self._held) >= self.rank_wait:
            self.release()

    def _name(self, m: Metric) -> None:
        tag = self._tag(m, len(self._ranks) > 1 and m.rank not in self._plain)
        step = scalar_step(m)
        if step is None:
            step = self._counts.get(tag, 0)
        self._counts[tag] = self._counts.get(tag, 0) + 1
        self._emit(tag, step, m)
