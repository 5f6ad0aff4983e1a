"""Where a stop rule must fire in a real log, found from the log's text alone (its own regexes,
not trainvisor's parsers), so a test compares the rule engine with an independent reading."""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Optional

CAFFE_TRAIN_LOSS = re.compile(r"Train net output #\d+: loss = (\S+)")
CAFFE_TEST_LOSS = re.compile(r"Test net output #\d+: loss = (\S+)")
CAFFE_TEST_ACCURACY = re.compile(r"Test net output #\d+: accuracy = (\S+)")
DARKNET_LOSS = re.compile(r"^\d+: (\S+), \S+ avg")
DARKNET_REGION16_IOU = re.compile(r"^Region 16 Avg IOU: (\S+),")
KERAS_VAL_ACC = re.compile(r" - val_acc: (\S+)")


def values(path: Path, pattern: re.Pattern) -> list[tuple[int, float]]:
    """(line number, value) of every line `pattern` matches; darknet's `-nan` is nan."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = pattern.search(line)
            if m:
                out.append((number, float(m.group(1).replace("-nan", "nan"))))
    return out


def first_above(series: list[tuple[int, float]], limit: float) -> Optional[tuple[int, float]]:
    return next(((n, v) for n, v in series if v >= limit), None)


def first_nan(series: list[tuple[int, float]]) -> Optional[tuple[int, float]]:
    return next(((n, v) for n, v in series if math.isnan(v)), None)


def first_plateau(series: list[tuple[int, float]], evals: int, maximise: bool) -> Optional[tuple[int, float]]:
    """The Nth value in a row that is not strictly better than the best before it."""
    best, waited = None, 0
    for n, v in series:
        if best is None or (v > best if maximise else v < best):
            best, waited = v, 0
            continue
        waited += 1
        if waited >= evals:
            return n, v
    return None


def first_divergence(series: list[tuple[int, float]], factor: float) -> Optional[tuple[int, float]]:
    """The first value above `factor` times the lowest value before it."""
    low = None
    for n, v in series:
        if low is not None and v > factor * low:
            return n, v
        low = v if low is None else min(low, v)
    return None


def earliest(*found: Optional[tuple[int, float]]) -> Optional[tuple[int, float]]:
    hits = [f for f in found if f is not None]
    return min(hits) if hits else None
