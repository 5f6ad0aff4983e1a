"""Which verified checkpoint sets a store keeps: the policy and the pure choice (`select_deletions`).

`--keep-last N` keeps the N newest verified sets, `--keep-best K --best-by 'val/accuracy max'` the
K whose value of that metric is best; given together, a set either keeps is kept. Whatever the
policy says, the newest verified set is kept (it is what a restart resumes from), and a set counts
only once it is verified, so nothing is deleted before a newer set is whole in the store.

A set's value is the metric's record nearest at or before the set's iteration (else its epoch):
`SetValue`, made by values.py from the parsed log. While the log has not yet passed that step, the
value may still change (Caffe tests at iteration N after writing the snapshot of N): such a set is
*undecided* and is neither deleted nor allowed to keep others out. A set is deleted only when at
least K decided sets are better than it whatever the undecided ones turn out to be, so a later
record never shows that a best set was deleted. A set with no value never counts as best.

Imported by the configuration to check `--best-by` where it is written: this module imports no
store library.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ..errors import ConfigError

__all__ = ["BestBy", "RetentionPolicy", "SetValue", "RetainedSet", "parse_best_by", "best_by_problem",
           "select_deletions", "EVALUATION_PHASES"]

EVALUATION_PHASES = ("val", "test")
"""A --best-by metric named without a phase is read from these: "the validation value"."""
_PHASES = ("train",) + EVALUATION_PHASES
_GOALS = {"max": True, "min": False}


@dataclass(frozen=True)
class BestBy:
    """The metric that ranks sets: `name` in one of `phases`, better when higher (`maximise`)."""

    text: str
    name: str
    phases: tuple[str, ...]
    maximise: bool

    def matches(self, phase: str, name: str) -> bool:
        return name == self.name and phase in self.phases


def parse_best_by(text: str, *, setting: str = "--best-by") -> BestBy:
    """`NAME max|min` or `PHASE/NAME max|min` (PHASE: train, val, test); a one-line ConfigError."""
    words = str(text).split()
    if len(words) != 2 or words[1].lower() not in _GOALS:
        raise ConfigError(f"{setting} {text!r}: expected 'METRIC max' or 'METRIC min' "
                          "(e.g. 'val/accuracy max', 'test/loss min')")
    metric, goal = words[0], _GOALS[words[1].lower()]
    phase, slash, name = metric.partition("/")
    if slash and phase in _PHASES and name:
        return BestBy(str(text), name, (phase,), goal)
    return BestBy(str(text), metric, EVALUATION_PHASES, goal)


def best_by_problem(value: object) -> Optional[str]:
    """The configuration's check of `upload.best_by` (None: fine)."""
    if value is None:
        return None
    try:
        parse_best_by(str(value))
    except ConfigError:
        return "must be 'METRIC max' or 'METRIC min' (e.g. 'val/accuracy max')"
    return None


@dataclass(frozen=True)
class RetentionPolicy:
    """What a store keeps of a run's sets; None for either number: that rule is off."""

    keep_last: Optional[int] = None
    keep_best: Optional[int] = None
    best_by: Optional[BestBy] = None

    def __post_init__(self) -> None:
        if self.keep_best is not None and self.best_by is None:
            raise ConfigError("upload.keep_best (--keep-best) needs upload.best_by (--best-by 'METRIC max|min')")
        for name in ("keep_last", "keep_best"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"upload.{name}: must be at least 1 (got {value})")

    @property
    def active(self) -> bool:
        return self.keep_last is not None or self.keep_best is not None

    @classmethod
    def of(cls, keep_last: Optional[int], keep_best: Optional[int], best_by: Optional[str]) -> "RetentionPolicy":
        return cls(keep_last, keep_best, parse_best_by(best_by, setting="upload.best_by") if best_by else None)


@dataclass(frozen=True)
class SetValue:
    """A set's value of the --best-by metric: None when the log has none at or before its step;
    `decided` once the log has passed the step (no later record can change it)."""

    value: Optional[float]
    decided: bool


@dataclass(frozen=True)
class RetainedSet:
    """A verified set as the policy sees it: `order` sorts oldest to newest (iteration, then
    epoch, then when it was verified), `keys` are the objects its manifest lists and the manifest."""

    set_key: str
    name: str
    order: tuple
    keys: tuple[str, ...]
    value: SetValue = SetValue(None, True)


def select_deletions(sets: Sequence[RetainedSet], policy: RetentionPolicy) -> tuple[RetainedSet, ...]:
    """The sets to delete, oldest first: those neither among the `keep_last` newest nor possibly
    among the `keep_best` best, never the newest one, never an undecided one (pure)."""
    if not policy.active or len(sets) < 2:
        return ()
    ordered = sorted(sets, key=lambda s: s.order)
    newest = ordered[-1]
    kept = {s.set_key for s in ordered[-policy.keep_last:]} if policy.keep_last else set()
    kept.add(newest.set_key)
    out = []
    for s in ordered:
        if s.set_key in kept or not s.value.decided:
            continue
        if policy.keep_best is not None and not _surely_outranked(s, ordered, policy):
            continue
        out.append(s)
    return tuple(out)


def _surely_outranked(s: RetainedSet, sets: Sequence[RetainedSet], policy: RetentionPolicy) -> bool:
    """Whether at least `keep_best` decided sets are better than `s` (a tie goes to the newer):
    then `s` is not among the best whatever the undecided sets' values turn out to be."""
    assert policy.keep_best is not None and policy.best_by is not None
    if s.value.value is None or s.value.value != s.value.value:  # no value, or NaN: never best
        return True
    better = 0
    for other in sets:
        v = other.value.value
        if other is s or not other.value.decided or v is None or v != v:
            continue
        wins = v > s.value.value if policy.best_by.maximise else v < s.value.value
        if wins or (v == s.value.value and other.order > s.order):
            better += 1
    return better >= policy.keep_best
