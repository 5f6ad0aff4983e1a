"""Metrics -> panels -> lines: what `trainvisor plot` draws, decided without matplotlib.

The rule of a **family** (one panel): a metric's name without a phase word as its prefix or
suffix, the one rule the parsers name phases by (`parsers.common.split_phase`: ``train``,
``val``, ``eval``, ``test``, ``dev``... joined by ``_ / . -`` or a space). So ``loss`` of
the train phase, Keras' ``val_loss`` (parsed as ``loss``, phase val), Caffe's test net ``loss``
and the Hugging Face Trainer's end-of-run ``train_loss`` share the panel ``loss``, each its own
line; ``loss_cls``, ``total_loss``, ``loss1/loss`` and ``bbox_mAP_50`` are families of their own
(their own scale: a component of a loss is not the loss).

A **line** (`Series`) is one family member: name, phase, Caffe test net, rank, the run's
attempt, running or not. Its points stay in the order they were logged (a resumed training
that repeats iterations draws back, as the log did), and NaN or infinite values stay in the
data: matplotlib leaves a gap there, so a diverged loss shows as the line ending, not as a
silently dropped point.

The **x axis** is the iteration, else the epoch: with ``x="auto"`` the iteration, unless the
epoch leaves fewer values out (Caffe, detectron2, mmdetection, the Hugging Face Trainer draw
over iterations; Keras without step lines, and MXNet, whose validation lines carry only an
epoch, over epochs). A value without the chosen x is left out and counted (`Chart.left_out`),
never placed somewhere it was not logged.

**Running values** (a progress bar's live postfix, Keras step lines: `Metric.running`) are
left out unless asked for; then they are lines of their own (``running`` in the label).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, Sequence

from ..errors import ConfigError, TrainvisorError
from ..events import Metric
from ..parsers.common import split_phase

__all__ = ["Point", "Series", "Panel", "Chart", "NothingToPlot", "X_AXES", "MAX_PANELS", "family_of", "build_chart"]

X_AXES = ("auto", "iteration", "epoch")
# 16 rows of 4 panels: a figure 5,760 pixels tall (DETR's log has 59 families: its losses and
# each decoder layer's). More (a detection log's per-class APs) is no figure anyone reads, and
# grows towards what the Agg renderer can draw: choose with --metric instead.
MAX_PANELS = 64


class NothingToPlot(TrainvisorError):
    """The source holds no value the plot could draw: said in one line, never an empty figure."""

    exit_code = 1


class Point(NamedTuple):
    """A metric as read back, with the attempt of the run that wrote it (None: a log or a file
    without attempts)."""

    metric: Metric
    attempt: Optional[int] = None


@dataclass(frozen=True)
class Series:
    """One line of a panel: its identity and its points (x, y), in logged order."""

    family: str
    name: str
    phase: str
    test_net: Optional[int]
    rank: Optional[int]
    attempt: Optional[int]
    running: bool
    xs: tuple[float, ...]
    ys: tuple[float, ...]

    @property
    def label(self) -> str:
        """``loss train``, ``loss test net 0``, ``loss val rank 1 attempt 2 running``: what tells
        the lines of one panel apart (the attempt only when the source has more than one)."""
        parts = [self.name, self.phase]
        if self.test_net is not None:
            parts.append(f"net {self.test_net}")
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.attempt is not None:
            parts.append(f"attempt {self.attempt}")
        if self.running:
            parts.append("running")
        return " ".join(parts)


@dataclass(frozen=True)
class Panel:
    family: str
    series: tuple[Series, ...]


@dataclass(frozen=True)
class Chart:
    """What a figure draws: the x axis (``iteration`` or ``epoch``), the panels in the order
    their families first appear, and how many values had no x of that kind (left out)."""

    x: str
    panels: tuple[Panel, ...]
    left_out: int


def family_of(name: str) -> str:
    """The panel a metric named `name` goes to: its name without a phase prefix or suffix."""
    split = split_phase(name)
    return split[0] if split else name


def build_chart(points: Sequence[Point], *, x: str = "auto", metrics: Sequence[str] = (),
                running: bool = False) -> Chart:
    """The chart of `points`. `metrics`: keep only these names or families (an unknown one is an
    error naming what there is); `running`: draw running values too, as lines of their own.
    NothingToPlot when no value is left to draw, saying why; ConfigError for a bad `x` or name."""
    if x not in X_AXES:
        raise ConfigError(f"--x must be one of {', '.join(X_AXES)}, got {x!r}")
    kept = [p for p in points if running or not p.metric.running]
    if not kept:
        raise NothingToPlot(_empty_reason(points))
    kept = _selected(kept, metrics)
    axis = _axis(kept, x)
    one_attempt = len({p.attempt for p in kept}) <= 1
    lines: dict[tuple, tuple[list[float], list[float]]] = {}
    left_out = 0
    for metric, attempt in kept:
        at = metric.iteration if axis == "iteration" else metric.epoch
        if at is None:
            left_out += 1
            continue
        key = (family_of(metric.name), metric.name, metric.phase, metric.test_net, metric.rank,
               None if one_attempt else attempt, metric.running)
        xs, ys = lines.setdefault(key, ([], []))
        xs.append(float(at))
        ys.append(metric.value)
    if not lines:
        raise NothingToPlot(f"no value to plot has an {axis}; try --x {'epoch' if axis == 'iteration' else 'iteration'}")
    panels = _panels(lines)
    if len(panels) > MAX_PANELS:
        names = ", ".join(p.family for p in panels[:5])
        raise ConfigError(f"{len(panels)} metric families are too many for one figure (at most {MAX_PANELS}): "
                          f"choose with --metric NAME (there are {names} ...)")
    return Chart(axis, panels, left_out)


def _empty_reason(points: Sequence[Point]) -> str:
    if not points:
        return "no metrics found"
    return f"only running values found ({len(points)}, progress-bar states); --running plots them"


def _selected(points: list[Point], metrics: Sequence[str]) -> list[Point]:
    if not metrics:
        return points
    wanted = set(metrics)
    there = {p.metric.name for p in points} | {family_of(p.metric.name) for p in points}
    unknown = sorted(wanted - there)
    if unknown:
        families = sorted({family_of(p.metric.name) for p in points})
        raise ConfigError(f"no metric named {', '.join(unknown)}; there are: {', '.join(families)}")
    return [p for p in points if p.metric.name in wanted or family_of(p.metric.name) in wanted]


def _axis(points: list[Point], x: str) -> str:
    if x != "auto":
        return x
    no_iteration = sum(p.metric.iteration is None for p in points)
    no_epoch = sum(p.metric.epoch is None for p in points)
    return "epoch" if no_epoch < no_iteration else "iteration"


def _panels(lines: dict[tuple, tuple[list[float], list[float]]]) -> tuple[Panel, ...]:
    """Panels and their lines in the order they first appear (dicts keep insertion order)."""
    families: dict[str, list[Series]] = {}
    for (family, name, phase, test_net, rank, attempt, running), (xs, ys) in lines.items():
        families.setdefault(family, []).append(
            Series(family, name, phase, test_net, rank, attempt, running, tuple(xs), tuple(ys)))
    return tuple(Panel(family, tuple(series)) for family, series in families.items())
