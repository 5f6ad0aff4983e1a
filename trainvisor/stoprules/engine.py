"""The rule set (`StopRules`: pure, clock injected), the record of a rule that fired (`Firing`),
and `StopRuleSink`, the inline sink that feeds a run's metrics to the rules on the pipeline
thread and calls back once when one fires (the Run then asks the child to stop).

Evaluated inline: a rule costs a dict lookup or a comparison per metric, far less than the
parsing that made it, and inline it sees each metric with its exact line, in order.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ..events import Metric
from .grammar import Bound, RuleSpec, Silence, parse_rule
from .rules import RuleState, make_state

__all__ = ["Firing", "StopRules", "StopRuleSink"]

log = logging.getLogger("trainvisor")


def _fmt(v: float) -> str:
    """The value as the log printed it (the shortest repr of the float parsed from it), not rounded."""
    return repr(float(v))


@dataclass(frozen=True)
class Firing:
    """A rule that held: the rule as written, and the record that made it hold (its metric
    `phase/name`, value, line and stream, iteration, epoch; for `iteration >= N` / `epoch >= N`,
    `metric` is "iteration" / "epoch" and `value` that count). For `no metric for`, `metric` is
    None, `value` the seconds without one and `line` the last metric's line (None if none came)."""

    rule: str
    metric: Optional[str]
    value: float
    line: Optional[int]
    stream: Optional[str]
    iteration: Optional[int] = None
    epoch: Optional[float] = None

    def describe(self) -> str:
        """One line: which rule, where, with which value (the stop reason, the summary's line)."""
        if self.metric is None:
            where = f"after the {self.stream} line {self.line}" if self.line is not None else "before any metric"
            return f"stop rule {self.rule!r}: no metric for {self.value:.0f}s ({where})"
        where = f"stop rule {self.rule!r} fired at {self.stream} line {self.line}"
        if self.metric in ("iteration", "epoch"):  # a bound: the value is the count itself
            return f"{where}: {self.metric} {self.value:g}"
        at = f" (iteration {self.iteration})" if self.iteration is not None else (
            f" (epoch {self.epoch:g})" if self.epoch is not None else "")
        return f"{where}: {self.metric} = {_fmt(self.value)}{at}"


class StopRules:
    """The rules of a run. `observe(metric)` and `tick(now)` return the first `Firing` (then
    nothing more: a run stops once); `unmatched()` the rules whose metric never came."""

    def __init__(self, rules: Sequence["str | RuleSpec"], *, now: float = 0.0, setting: str = "--stop-when") -> None:
        specs = [parse_rule(r, setting=setting) if isinstance(r, str) else r for r in rules]
        self.states: list[RuleState] = [make_state(s, now) for s in specs]
        self._timed = [s for s in self.states if isinstance(s.spec, Silence)]
        self.fired: Optional[Firing] = None
        self._last: Optional[Metric] = None
        self._seen: set[tuple[str, str]] = set()  # (phase, name): what an unmatched rule could have named
        # The states that may read a metric of each name, in rule order (the first rule written
        # wins a tie): most metrics are read by none, or one, of the rules.
        self._readers: dict[str, tuple[RuleState, ...]] = {}

    @property
    def names_seen(self) -> set[str]:
        return {f"{phase}/{name}" for phase, name in self._seen}

    def _readers_of(self, name: str) -> tuple[RuleState, ...]:
        readers = self._readers[name] = tuple(
            s for s in self.states if isinstance(s.spec, Bound) or (
                hasattr(s.spec, "selector") and any(n == name for _, n in s.spec.selector.keys)))
        return readers

    def observe(self, m: Metric) -> Optional[Firing]:
        if self.fired is not None:
            return None
        self._last = m
        self._seen.add((m.phase, m.name))
        readers = self._readers.get(m.name)
        for state in readers if readers is not None else self._readers_of(m.name):
            value = state.observe(m)
            if value is not None:
                # a bound reads the record's iteration / epoch, not its value: that is what is named
                metric = state.spec.field if isinstance(state.spec, Bound) else f"{m.phase}/{m.name}"
                self.fired = Firing(state.spec.text, metric, value, m.line, m.stream, m.iteration, m.epoch)
                return self.fired
        return None

    def tick(self, now: float) -> Optional[Firing]:
        if self.fired is not None:
            return None
        for state in self.states:
            quiet = state.tick(now)
            if quiet is not None:
                last = self._last
                self.fired = Firing(state.spec.text, None, quiet, last.line if last else None,
                                    last.stream if last else None)
                return self.fired
        return None

    def seen(self, now: float) -> None:
        """Metrics came at `now` (the silence rule's clock restarts)."""
        for state in self._timed:
            state.seen(now)

    @property
    def timed(self) -> bool:
        """Whether a rule reads the clock (`no metric for`): only then is the time of metrics noted."""
        return bool(self._timed)

    def unmatched(self) -> list[str]:
        """Rules that never read a metric: a name the run never produced, said at the end."""
        return [s.spec.text for s in self.states if not s.matched]



class StopRuleSink:
    """The rules as an inline sink: `write` observes each metric, `flush` (called by the pipeline
    every flush interval, also while the child is quiet) ticks the silence rule. `on_fire` is
    called once, on the pipeline thread, with the Firing."""

    name = "stop-rules"
    inline = True

    def __init__(self, rules: StopRules, on_fire: Callable[[Firing], None], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rules, self._on_fire, self._clock = rules, on_fire, clock
        self._timed = rules.timed

    def write(self, events: Sequence[object]) -> None:
        if self.rules.fired is not None:
            return
        observe, metrics = self.rules.observe, False
        for e in events:
            if type(e) is Metric:
                metrics = True
                firing = observe(e)
                if firing is not None:
                    self._on_fire(firing)
                    return
        if metrics and self._timed:
            self.rules.seen(self._clock())

    def flush(self) -> None:
        firing = self.rules.tick(self._clock())
        if firing is not None:
            self._on_fire(firing)

    def close(self) -> None:
        pass
