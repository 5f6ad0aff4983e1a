"""Saved logs, from Python: `replay` is `trainvisor replay LOG`, `parse_tables` is
`trainvisor parse LOG --csv DIR` / `--format sh -o DIR`; same options, same records.

The options are the parsing section's keys (`parser`, `rules`, `year`, `iters_per_epoch`,
`max_line_bytes`, `ranks`), checked as a `ParsingConfig` is, so a value means what it means in a
config file or on the command line. The parser is built as a run builds it (run/build.py) and
the log goes through the engine a live run uses: nothing here reads lines itself.

`replay` returns its events all at once (`Replayed`), not as an iterator: the engine pushes
events into sinks as it reads, so an iterator would need a thread or a second loop, and the
counts a caller checks with them are final only at the end. A log too large to keep goes to
`sinks`/`metrics` with `keep_events=False`, in flat memory.
"""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, BinaryIO, Iterator, Mapping, Optional, Sequence

from ..config import ParsingConfig
from ..config.schema import DEFAULT_MAX_LINE_BYTES, DEFAULT_RANKS
from ..errors import ConfigError
from ..events import Event, Metric

if TYPE_CHECKING:
    from ..parsers.base import Parser
    from ..stream.pipeline import LineHook, PipelineStats
    from ..sinks.base import Sink
    from ..sinks.tables import TablesWritten

__all__ = ["Replayed", "replay", "parse_tables"]

@dataclass(frozen=True)
class Replayed:
    """What a replay gave: its events in order (Metric, CheckpointEvent, Notice; empty with
    `keep_events=False`), the pipeline's counts, and the failures of sinks, hooks or the parser
    by component (counted, never raised, as in a live run)."""

    events: tuple[Event, ...]
    stats: "PipelineStats"
    faults: Mapping[str, int]

    @property
    def metrics(self) -> tuple[Metric, ...]:
        return tuple(e for e in self.events if type(e) is Metric)


class Collected:
    """The sink that keeps every event: `Replayed.events` (and a supervised run's in testing/)."""

    name = "events"

    def __init__(self) -> None:
        self.events: list[Event] = []

    def write(self, events: Sequence[Event]) -> None:
        self.events.extend(events)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def replay(
    path: "str | os.PathLike[str]",
    *,
    parser: str = "auto",
    rules: Optional[str] = None,
    year: Optional[int] = None,
    iters_per_epoch: Optional[int] = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ranks: str = DEFAULT_RANKS,
    metrics: "str | os.PathLike[str] | IO[str] | None" = None,
    sinks: "Sequence[Sink]" = (),
    hooks: "Sequence[LineHook]" = (),
    keep_events: bool = True,
) -> Replayed:
    """Parse the saved log at `path` exactly as `trainvisor run` would have parsed it live.

    `year`: of the log's first timestamp (glog lines carry none); default: the year of the file's
    mtime. `metrics`: a path or text stream the JSON lines are written to as they come (what
    `--metrics` writes); `sinks` and `hooks` get the events and lines too. The events are
    returned as a tuple, kept in memory: pass `keep_events=False` for a log too large for that.
    ConfigError (one line) for an unreadable log, a bad option, an unknown parser or rules file.
    """
    from ..stream.pipeline import Pipeline
    from ..stream.replay import replay_stream

    cfg = ParsingConfig(parser=parser, rules=rules, year=year, iters_per_epoch=iters_per_epoch,
                        max_line_bytes=max_line_bytes, ranks=ranks)
    with _opened(path, cfg) as (stream, built):
        collect = Collected() if keep_events else None
        every = [*_metrics_sink(metrics), *sinks, *([collect] if collect else [])]
        pipeline = Pipeline(built, sinks=every, hooks=hooks)
        stats = replay_stream(stream, pipeline, max_line=cfg.max_line_bytes)
    return Replayed(tuple(collect.events) if collect else (), stats, dict(pipeline.faults.counts))


def parse_tables(
    path: "str | os.PathLike[str]",
    out_dir: "str | os.PathLike[str]",
    *,
    layout: str = "csv",
    parser: str = "auto",
    rules: Optional[str] = None,
    year: Optional[int] = None,
    iters_per_epoch: Optional[int] = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ranks: str = DEFAULT_RANKS,
    sinks: "Sequence[Sink]" = (),
) -> "TablesWritten":
    """Write `out_dir/<log name>.train` and `.test` in `layout`: ``csv`` (Caffe's parse_log.py,
    what pandas reads) or ``sh`` (parse_log.sh's, what plot_training_log.py reads). Returns the
    files written and whether the log held any Caffe row; `sinks` get the events too. Memory
    stays flat in the log's length. The parsing options are `replay`'s."""
    from ..sinks.tables import LAYOUTS, write_tables

    if layout not in LAYOUTS:
        raise ConfigError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    cfg = ParsingConfig(parser=parser, rules=rules, year=year, iters_per_epoch=iters_per_epoch,
                        max_line_bytes=max_line_bytes, ranks=ranks)
    with _opened(path, cfg) as (stream, built):
        return write_tables(stream, built, out_dir, os.path.basename(path), layout=layout, sinks=sinks,
                            max_line=cfg.max_line_bytes)


@contextmanager
def _opened(path: "str | os.PathLike[str]", cfg: ParsingConfig) -> "Iterator[tuple[BinaryIO, Parser]]":
    """The log as UTF-8 bytes (a gzip, bzip2 or xz log decompressed; a UTF-16 or GBK log
    transcoded) and the parser `cfg` names; the log is opened first, so a wrong path is said
    before anything else is built."""
    from ..run.build import build_parser
    from ..stream.compressed import decompressed
    from ..stream.encoding import open_log_bytes

    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise ConfigError(f"cannot read {os.fspath(path)}: {exc.strerror}") from exc
    with fh:
        year = time.localtime(os.fstat(fh.fileno()).st_mtime).tm_year
        yield open_log_bytes(decompressed(fh, os.fspath(path))), build_parser(cfg, argv=(), year=year)


def _metrics_sink(metrics: "str | os.PathLike[str] | IO[str] | None") -> "list[Sink]":
    if metrics is None:
        return []
    from ..sinks.jsonl import JsonlSink

    return [JsonlSink(metrics)]
