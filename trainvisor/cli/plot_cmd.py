"""`trainvisor plot SOURCE -o OUT`: a run's metrics drawn (trainvisor.plot)."""
from __future__ import annotations

from typing import Any

import click

from .flags import PARSING_FLAGS, with_flags
from .log_cmds import _parsing

__all__ = ["plot"]


@click.command()
@with_flags(PARSING_FLAGS)
@click.option("-o", "--out", "out", required=True, type=click.Path(dir_okay=False),
              help="The image to write; its suffix names the format: .png, .svg or .pdf.")
@click.option("--x", "x", type=click.Choice(["auto", "iteration", "epoch"]), default="auto", show_default=True,
              help="The x axis: the iteration or the epoch (auto: the iteration, unless the epoch leaves fewer values out).")
@click.option("--metric", "metrics", multiple=True, metavar="NAME",
              help="Draw only this metric or family (repeatable): loss draws loss, val_loss, train_loss.")
@click.option("--running", is_flag=True, help="Draw running values (progress-bar states) too, as their own lines.")
@click.option("--title", default=None, help="The figure's title (default: the source's name).")
@click.argument("source", metavar="RUN_DIR|METRICS.jsonl|LOG", type=click.Path())
def plot(flag_values: dict[str, Any], out: str, x: str, metrics: tuple[str, ...], running: bool,
         title: str | None, source: str) -> None:
    """Draw SOURCE's metrics into OUT: one panel per metric family (loss, val_loss and
    train_loss together), train and validation lines side by side, x the iteration or the
    epoch. SOURCE is a run directory, a metrics.jsonl, or a training log (parsed first, as
    `trainvisor replay` parses it). Needs matplotlib: pip install trainvisor[plot]."""
    from ..plotting import plot as draw

    done = draw(source, out, x=x, metrics=metrics, running=running, title=title, **_parsing(flag_values))
    panels = len(done.chart.panels)
    lines = sum(len(panel.series) for panel in done.chart.panels)
    click.echo(f"wrote {done.out}: {_count(panels, 'panel')}, {_count(lines, 'line')}, x = {done.chart.x}", err=True)
    if done.chart.left_out:
        # said, not hidden: these values were logged, but not at any point of this x axis
        click.echo(f"trainvisor: {_count(done.chart.left_out, 'value')} without an {done.chart.x} left out", err=True)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"
