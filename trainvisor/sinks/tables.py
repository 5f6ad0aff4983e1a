"""`trainvisor parse`'s tables: the layouts of Caffe's two log parsers, filled by one replay.

``csv``: tools/extra/parse_log.py's CSV (caffe_csv.py), what pandas and most custom scripts read.
``sh``: tools/extra/parse_log.sh's aligned text (caffe_sh.py), what plot_training_log.py reads.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, BinaryIO, Sequence

from ..stream.lines import DEFAULT_MAX_LINE
from ..stream.pipeline import Pipeline
from ..stream.replay import replay_stream
from .base import Sink
from .caffe_csv import CaffeCsvSink
from .caffe_sh import CaffeShSink

__all__ = ["LAYOUTS", "TablesWritten", "write_tables"]

LAYOUTS = ("csv", "sh")


@dataclass(frozen=True)
class TablesWritten:
    """What a parse wrote: the files, and whether the log held any Caffe row (parse_log.sh's
    layout writes its two files, header only, even when not)."""

    paths: tuple[str, ...]
    found: bool


def write_tables(
    stream: BinaryIO,
    parser: Any,
    outdir: str | os.PathLike,
    basename: str,
    *,
    layout: str = "csv",
    sinks: Sequence[Sink] = (),
    max_line: int = DEFAULT_MAX_LINE,
) -> TablesWritten:
    """Replay `stream` through `parser` (a Parser; typed loosely because sinks/ never import
    parsers/) into ``OUTDIR/<basename>.train`` and ``.test`` in `layout`; `sinks` get the same
    events (the metric stream beside the tables)."""
    if layout == "sh":
        sh = CaffeShSink(outdir, basename)
        replay_stream(stream, Pipeline(sh.watching(parser), sinks=[*sinks, sh]), max_line=max_line)
        return TablesWritten(tuple(sh.written), sh.rows > 0)
    if layout == "csv":
        csv = CaffeCsvSink(outdir, basename)
        replay_stream(stream, Pipeline(parser, sinks=[*sinks, csv]), max_line=max_line)
        return TablesWritten(tuple(csv.written), bool(csv.written))
    raise ValueError(f"unknown table layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
