"""`trainvisor plot`: a run's metrics drawn, one panel per metric family, what Caffe users get
from tools/extra/plot_training_log.py, for every log format trainvisor parses.

    from trainvisor import plot
    done = plot("runs/exp1", "exp1.png")            # a run directory, a metrics.jsonl or a log
    done.figure.axes[0].lines[0].get_xydata()       # the figure, to read back

load.py (the source's metrics), series.py (the pure part: families, lines, the x axis),
figure.py (matplotlib, object API only). The folder is `plotting`, not `plot`: a subpackage
named `plot` would replace the function `trainvisor.plot` on the package once imported.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from ..config.schema import DEFAULT_MAX_LINE_BYTES, DEFAULT_RANKS
from .figure import build_figure, output_format, save_figure
from .load import Loaded, load_points
from .series import Chart, NothingToPlot, build_chart

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot", "Plotted", "NothingToPlot"]


@dataclass(frozen=True)
class Plotted:
    """What `plot` drew: the file written, the source read (`kind`: run, jsonl or log), the
    chart (panels, lines, values left out) and the matplotlib Figure itself."""

    out: str
    source: Loaded
    chart: Chart
    figure: "Figure"


def plot(
    source: "str | os.PathLike[str]",
    out: "str | os.PathLike[str]",
    *,
    x: str = "auto",
    metrics: Sequence[str] = (),
    running: bool = False,
    title: Optional[str] = None,
    parser: str = "auto",
    rules: Optional[str] = None,
    year: Optional[int] = None,
    iters_per_epoch: Optional[int] = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ranks: str = DEFAULT_RANKS,
) -> Plotted:
    """Draw `source` (RUN_DIR, a metrics.jsonl, or a training log, parsed first with the parsing
    options, `trainvisor.replay`'s) into `out` (.png, .svg or .pdf).

    `x`: ``iteration``, ``epoch`` or ``auto`` (the iteration, unless the epoch leaves fewer values out);
    `metrics`: only these names or families; `running`: progress-bar values too, as their own
    lines. NothingToPlot when the source holds no value to draw; ConfigError for a bad option,
    output suffix or source; both one line."""
    output_format(out)
    loaded = load_points(source, parsing=dict(parser=parser, rules=rules, year=year,
                                              iters_per_epoch=iters_per_epoch,
                                              max_line_bytes=max_line_bytes, ranks=ranks))
    try:
        chart = build_chart(loaded.points, x=x, metrics=metrics, running=running)
    except NothingToPlot as exc:
        raise NothingToPlot(f"nothing to plot in {os.fspath(source)}: {exc}") from None
    name = os.path.basename(os.path.normpath(os.fspath(source)))
    figure = build_figure(chart, title=name if title is None else title)
    save_figure(figure, out)
    return Plotted(os.fspath(out), loaded, chart, figure)
