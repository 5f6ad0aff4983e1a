"""A `Chart` drawn as a matplotlib Figure, and the figure written to a file.

The object API only (Figure, its Agg canvas): no pyplot, so nothing lands in pyplot's global
list of figures, no GUI backend is chosen, and a caller (a test, a notebook) gets the Figure
back to read its artists. matplotlib is imported here only, when a plot is made: it is the
`plot` extra, not a dependency of a run.
"""
from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .series import Chart

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["FORMATS", "output_format", "build_figure", "save_figure"]

FORMATS = ("png", "svg", "pdf")
# Markers on lines this short, so one value (an evaluation at the end) is a dot, not nothing;
# on longer lines they would hide the curve.
_MARKER_MAX_POINTS = 100
_PANEL_INCHES = (6.4, 3.6)
_DPI = 100  # fixed, so a panel is 640 x 360 pixels whatever dpi a matplotlibrc sets


def output_format(out: "str | os.PathLike[str]") -> str:
    """The file format `out`'s suffix names; ConfigError for any other, before anything is read."""
    suffix = os.path.splitext(os.fspath(out))[1].lower().lstrip(".")
    if suffix not in FORMATS:
        given = f"'.{suffix}'" if suffix else "no suffix"
        raise ConfigError(f"the output's suffix names its format: .png, .svg or .pdf, got {given} ({os.fspath(out)})")
    return suffix


def _matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install trainvisor[plot]") from None


def build_figure(chart: Chart, *, title: str = "") -> "Figure":
    """One panel (Axes) per family, in the chart's order, one Line2D per series with the series'
    label, x and y exactly as the chart holds them; the figure's axes are the panels only."""
    _matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    count = len(chart.panels)
    cols = 1 if count == 1 else 2 if count <= 8 else 3 if count <= 24 else 4
    rows = math.ceil(count / cols)
    fig = Figure(figsize=(_PANEL_INCHES[0] * cols, _PANEL_INCHES[1] * rows), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for ax, panel in zip(axes, chart.panels):
        for series in panel.series:
            marker = "." if len(series.xs) <= _MARKER_MAX_POINTS else None
            ax.plot(series.xs, series.ys, marker=marker, linewidth=1, label=series.label)
        ax.set_title(panel.family)
        ax.set_xlabel(chart.x)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    for ax in axes[count:]:
        fig.delaxes(ax)
    if title:
        fig.suptitle(title)
    return fig


def save_figure(fig: "Figure", out: "str | os.PathLike[str]") -> None:
    """Write `fig` to `out` in the format its suffix names; its folder is made when missing, as
    the metrics file's is (a run's output folder need not exist before the run)."""
    parent = os.path.dirname(os.fspath(out))
    if parent:
        os.makedirs(parent, exist_ok=True)
    fig.savefig(os.fspath(out), format=output_format(out), dpi=_DPI)
