"""Shortcut flags for sinks: `--tensorboard DIR` is `--sink tensorboard` with
`sinks.options.tensorboard.dir: DIR`. A shortcut adds its sink to those the config file (or
`--sink`) already names instead of replacing them, and sets one option, leaving the file's other
options of that sink as they are: `--prometheus-port 9100` with a file that gives prometheus
labels keeps the labels."""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import click

from ..config import RunConfig

__all__ = ["SinkShortcut", "SINK_SHORTCUTS", "with_sink_shortcuts", "apply_sink_shortcuts"]


class SinkShortcut(NamedTuple):
    """`decl VALUE` adds sink `sink` with `option: VALUE` (a NamedTuple: cheap to define at start)."""

    decl: str
    sink: str
    option: str
    metavar: str
    type: Any
    help: str

    @property
    def dest(self) -> str:
        return "shortcut_" + self.decl.lstrip("-").replace("-", "_")


SINK_SHORTCUTS = (
    SinkShortcut("--tensorboard", "tensorboard", "dir", "DIR", click.STRING,
                 "TensorBoard scalars in DIR (sink tensorboard; needs trainvisor[tensorboard])."),
    SinkShortcut("--prometheus-port", "prometheus", "port", "PORT", click.IntRange(0, 65535),
                 "Serve the latest metrics and the run's state on http://127.0.0.1:PORT/metrics "
                 "(0: a free port, logged; sink prometheus; needs trainvisor[prometheus])."),
    SinkShortcut("--csv", "csv", "dir", "DIR", click.STRING,
                 "One CSV file per phase in DIR: train.csv, val.csv, test.csv (sink csv)."),
    SinkShortcut("--webhook", "webhook", "url", "URL", click.STRING,
                 "POST the records and per-epoch statistics as batched JSON to URL (sink webhook; "
                 "a bearer token from $TRAINVISOR_WEBHOOK_TOKEN or --credentials)."),
    SinkShortcut("--mlflow", "mlflow", "tracking_uri", "URI", click.STRING,
                 "Log params, metrics and the run's status to the MLflow tracking server at URI "
                 "(sink mlflow; needs trainvisor[mlflow]; a file: store needs MLFLOW_ALLOW_FILE_STORE=true)."),
)


def with_sink_shortcuts(f: Callable) -> Callable:
    """Decorate a command: the shortcuts' values arrive as one `shortcut_values` dict
    ({shortcut: value} for those given)."""

    @functools.wraps(f)
    def wrapper(**kwargs: Any) -> Any:
        given = {}
        for s in SINK_SHORTCUTS:
            value = kwargs.pop(s.dest, None)
            if value is not None:
                given[s] = value
        return f(shortcut_values=given, **kwargs)

    for s in reversed(SINK_SHORTCUTS):
        wrapper = click.option(s.decl, s.dest, type=s.type, default=None, metavar=s.metavar, help=s.help)(wrapper)
    return wrapper


def apply_sink_shortcuts(config: RunConfig, given: dict) -> RunConfig:
    """`config` with each given shortcut's sink added to `sinks.use` and its option set."""
    sinks = config.sinks
    for shortcut, value in given.items():
        sinks = sinks.with_sink(shortcut.sink, {shortcut.option: value})
    return config if sinks is config.sinks else config.with_sinks(sinks)
