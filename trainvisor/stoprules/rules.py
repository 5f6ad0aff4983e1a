"""The stop rules' state machines: one object per rule, fed every metric in order (`observe`)
and, for the silence rule, the clock (`tick`). Pure: no threads, no clock of their own.

What a rule reads (the contract the README states):
- a rule on a metric reads the records its selector matches (name, and phase when given);
  running values (a progress bar's live postfix) are skipped, except by `is nan` / `is inf`,
  for which one nan is already the news;
- `no improvement` and the divergence rule keep one series per (phase, name, test net, rank):
  Caffe's two test nets, or two ranks, are not one curve. An eval is one record of the series
  (a Caffe test pass, a Keras epoch's validation); improvement is strictly better than the
  best so far, and the rule fires on the Nth eval in a row without one (Keras' EarlyStopping
  patience). A nan is never an improvement;
- divergence compares with the lowest value seen before this one (nan ignored);
- comparisons follow IEEE: a nan never satisfies `loss > 5` (that is what `is nan` is for).
"""
from __future__ import annotations

import math
import operator
from typing import Callable, Optional

from ..events import Metric
from .grammar import Bound, Divergence, NotFinite, Plateau, RuleSpec, Silence, Threshold

__all__ = ["RuleState", "make_state"]

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq, "!=": operator.ne}


class RuleState:
    """One rule's state. `observe` returns the value that made the rule hold on this metric (a
    metric value, an iteration or epoch), or None; `matched` says whether any metric was read."""

    spec: RuleSpec
    matched = False

    def observe(self, m: Metric) -> Optional[float]:
        return None

    def tick(self, now: float) -> Optional[float]:
        return None

    def _reads(self, m: Metric, *, running: bool = False) -> bool:
        """Whether this rule reads `m` (its selector, and running values only if `running`);
        a rule that reads one has `matched`."""
        if (m.running and not running) or not self.spec.selector.matches(m.phase, m.name):
            return False
        self.matched = True
        return True


class _ThresholdState(RuleState):
    def __init__(self, spec: Threshold) -> None:
        self.spec, self._op = spec, _OPS[spec.op]

    def observe(self, m: Metric) -> Optional[float]:
        return m.value if self._reads(m) and self._op(m.value, self.spec.value) else None


class _NotFiniteState(RuleState):
    def __init__(self, spec: NotFinite) -> None:
        self.spec = spec
        self._test: Callable[[float], bool] = {
            "nan": math.isnan, "inf": math.isinf, "not finite": lambda v: not math.isfinite(v)}[spec.kind]

    def observe(self, m: Metric) -> Optional[float]:
        return m.value if self._reads(m, running=True) and self._test(m.value) else None


def _series(m: Metric) -> tuple:
    return (m.phase, m.name, m.test_net, m.rank)


class _PlateauState(RuleState):
    def __init__(self, spec: Plateau) -> None:
        self.spec = spec
        self._best: dict[tuple, float] = {}
        self._waited: dict[tuple, int] = {}

    def observe(self, m: Metric) -> Optional[float]:
        if not self._reads(m):
            return None
        key, v = _series(m), m.value
        best = self._best.get(key)
        better = not math.isnan(v) and (best is None or (v > best if self.spec.maximise else v < best))
        if better:
            self._best[key], self._waited[key] = v, 0
            return None
        waited = self._waited[key] = self._waited.get(key, 0) + 1
        return v if waited >= self.spec.evals else None


class _DivergenceState(RuleState):
    def __init__(self, spec: Divergence) -> None:
        self.spec = spec
        self._min: dict[tuple, float] = {}

    def observe(self, m: Metric) -> Optional[float]:
        if not self._reads(m) or math.isnan(m.value):  # a nan is no lowest value, nor a divergence
            return None
        key, v = _series(m), m.value
        low = self._min.get(key, math.inf)  # the first value: no limit yet (K * inf)
        if v < low:
            self._min[key] = v
        limit = self.spec.factor * low
        return v if (v > limit if self.spec.strict else v >= limit) else None


class _BoundState(RuleState):
    def __init__(self, spec: Bound) -> None:
        self.spec, self._op = spec, _OPS[spec.op]

    def observe(self, m: Metric) -> Optional[float]:
        value = m.iteration if self.spec.field == "iteration" else m.epoch
        if value is None:
            return None
        self.matched = True
        return float(value) if self._op(value, self.spec.value) else None


class _SilenceState(RuleState):
    """Quiet since the last metric (or since the rules were made: a training that never prints
    one has hung too). The caller says when metrics came (`seen`, once per batch: no clock is
    read per metric)."""

    matched = True  # it reads no metric: nothing to report as unseen

    def __init__(self, spec: Silence, now: float) -> None:
        self.spec, self._last = spec, now

    def seen(self, now: float) -> None:
        self._last = now

    def tick(self, now: float) -> Optional[float]:
        quiet = now - self._last
        return quiet if quiet >= self.spec.seconds else None


def make_state(spec: RuleSpec, now: float) -> RuleState:
    """A fresh state for `spec`; `now` starts the silence rule's clock."""
    if isinstance(spec, Silence):
        return _SilenceState(spec, now)
    return {Threshold: _ThresholdState, NotFinite: _NotFiniteState, Plateau: _PlateauState,
            Divergence: _DivergenceState, Bound: _BoundState}[type(spec)](spec)
