"""The last and the best value of each metric, per phase: the small table a person reads when
a training ends ("where did it end, and where was it best?").

Which way is better is a fact about the metric's name, not its values: a loss, an error rate or a
perplexity is best at its lowest; an accuracy, a precision or a mAP at its highest; a learning
rate, a time or a throughput has no best, and the table says so instead of guessing. A running
value (a progress bar's mid-epoch postfix) does not compete with completed ones: a noisy batch
would otherwise be "best"; a metric that only ever had running values keeps them.
"""
from __future__ import annotations

import functools
import math
import re
from typing import Optional, Sequence

from .._frozen import frozen
from ..events import Metric

__all__ = ["MetricRow", "LastBest", "goal_of", "GOAL_MIN", "GOAL_MAX"]

GOAL_MIN = "min"
GOAL_MAX = "max"

# Word-ish pieces of a metric name, matched after splitting on separators. Compiled at the
# first metric, not at import: every run imports this module, a /bin/true run needs no regex.
_WORDS = {
    "error": r"err|error|errors|error_rate|wer|cer",
    "lower": r"loss|losses|err|error|errors|ppl|perplexity|mae|mse|rmse|wer|cer|nll|distance|dist|miss|fpr|fnr",
    "higher": r"acc|accuracy|prec|precision|recall|f1|fscore|map|map50|ap|ap50|ap75|aps|apm|apl|ar|auc|roc_auc|"
              r"iou|miou|bleu|rouge\w*|top1|top5|top_1|top_5|acc1|acc5|dice|psnr|ssim|r2|score|mcc|kappa|"
              r"exact_match|em|matthews_correlation",
    "neutral": r"lr|learning_rate|time|data_time|eta|speed|throughput|samples|steps_per_second|samples_per_second|"
               r"memory|mem|grad_norm|epoch|iter|iteration|step|batch|momentum|weight_decay|scale|loss_scale|"
               r"runtime|flos|total_flos",
}


@functools.lru_cache(maxsize=1)
def _patterns() -> dict[str, "re.Pattern[str]"]:
    return {k: re.compile(rf"(?:^|_)({v})(?:_|$)") for k, v in _WORDS.items()} | {"split": re.compile(r"[^a-z0-9]+")}


def goal_of(name: str) -> Optional[str]:
    """GOAL_MIN, GOAL_MAX, or None when the name says nothing (or says it is not a quality):
    `loss`, `val_loss`, `loss_cls` -> min, and `top1_err` too (an error rate wins); `accuracy`, `bbox/AP50`, `eval_f1` -> max;
    `lr`, `time`, `grad_norm` -> None. A name with both kinds of word (`acc_loss`) has no goal."""
    words = _patterns()
    key = words["split"].sub("_", name.lower()).strip("_")
    if words["neutral"].search(key):
        return None
    if words["error"].search(key):  # an error rate of anything (`top1_err`) is best at its lowest
        return GOAL_MIN
    lower, higher = bool(words["lower"].search(key)), bool(words["higher"].search(key))
    if lower == higher:
        return None
    return GOAL_MIN if lower else GOAL_MAX


@frozen
class MetricRow:
    """One line of the table: a metric of one phase (and Caffe test net). `step` is the record's
    iteration, else its epoch, else None; `best`/`best_step` are None when the metric has no goal.
    NaN never counts as best (a loss that became NaN ended worse, not better); `count` is how many
    values competed."""

    name: str
    phase: str
    test_net: Optional[int]
    last: float
    last_step: Optional[float]
    best: Optional[float]
    best_step: Optional[float]
    goal: Optional[str]
    count: int
    running: bool = False


def _step(m: Metric) -> Optional[float]:
    if m.iteration is not None:
        return float(m.iteration)
    return m.epoch


class LastBest:
    """Fed every metric (`add`, or `add_all` for a batch: the stats sink's per-record cost), gives
    the table (`rows`) and each (phase, name)'s last metric (`last`). Kept per (phase, test net,
    name); a row is [last, best or None, goal, count, running-only]."""

    def __init__(self) -> None:
        self._rows: dict[tuple, list] = {}
        self._goals: dict[str, Optional[str]] = {}

    def add_all(self, metrics: Sequence[Metric]) -> None:
        """`add` for each metric: the common case (a completed value of a known metric) inline,
        since this runs for every record of a run (~0.2 us each)."""
        rows, slow = self._rows, self.add
        for m in metrics:
            row = rows.get((m.phase, m.test_net, m.name))
            if row is None or m.running or row[4]:
                slow(m)
                continue
            row[0] = m
            row[3] += 1
            v, best = m.value, row[1]
            if v == v and (best is None or (v < best.value if row[2] == GOAL_MIN else
                                           row[2] == GOAL_MAX and v > best.value)):
                row[1] = m

    def add(self, m: Metric) -> None:
        key = (m.phase, m.test_net, m.name)
        row = self._rows.get(key)
        if row is None:
            goal = self._goals.get(m.name, 0)
            if goal == 0:
                goal = self._goals[m.name] = goal_of(m.name)
            self._rows[key] = [m, m if not math.isnan(m.value) else None, goal, 1, m.running]
            return
        if m.running and not row[4]:
            return  # a completed value exists: running ones do not compete
        if row[4] and not m.running:  # the first completed value: forget the running ones
            row[1], row[3], row[4] = None, 0, False
        row[0] = m
        row[3] += 1
        best, goal, v = row[1], row[2], m.value
        if v != v:
            return
        if best is None or (goal == GOAL_MIN and v < best.value) or (goal == GOAL_MAX and v > best.value):
            row[1] = m

    @property
    def last(self) -> dict[tuple[str, str], Metric]:
        """The last metric of each (phase, name): a completed value where there is one."""
        return {(phase, name): row[0] for (phase, _net, name), row in self._rows.items()}

    def rows(self) -> tuple[MetricRow, ...]:
        """The table, ordered by phase (train first) then name."""
        order = {"train": 0, "val": 1, "test": 2}
        out = []
        for (phase, net, name), (last, best, goal, count, running) in self._rows.items():
            has_best = goal is not None and best is not None
            out.append(MetricRow(name=name, phase=phase, test_net=net, last=last.value, last_step=_step(last),
                                 best=best.value if has_best else None, best_step=_step(best) if has_best else None,
                                 goal=goal, count=count, running=running))
        out.sort(key=lambda r: (order.get(r.phase, 3), r.phase, r.test_net or 0, r.name))
        return tuple(out)
