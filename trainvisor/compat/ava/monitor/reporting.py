"""What the monitor callbacks report through: trainvisor's pipeline (the Caffe parser, the
configured sinks), fed one line at a time by a line hook or with records made from MXNet's
in-process callbacks.

The sinks are those a run would have: `RunConfig.from_env()` (TRAINVISOR_CONFIG and
TRAINVISOR__SINKS__* variables) names them, and the JSONL file is `run/<id>/metrics.jsonl` in
the AVA workspace. The original SDK posted batches from a daemon thread and lost what it held
when the script ended; here every reporter is closed at interpreter exit (atexit) if the script
never called `TrainInstance.done()`, so the last records reach the files.
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from ....events import Event, LineBlock, LineRecord

__all__ = ["MetricReporter", "Line", "text_of", "block_of"]

log = logging.getLogger("trainvisor.compat.ava")

Line = Union[str, bytes, LineRecord]
_OPEN: "weakref.WeakSet[MetricReporter]" = weakref.WeakSet()


def text_of(line: Line) -> str:
    """A hook's argument as text without its line ending: AVA passed `str` lines with their
    newline; a `Run`'s line hooks pass `LineRecord`s."""
    if isinstance(line, LineRecord):
        return line.text
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    return line.rstrip("\r\n")


def block_of(text: str, number: int, wall_time: float) -> LineBlock:
    """One line as the parsers read lines: a block of one, numbered like the child's output."""
    return LineBlock(text + "\n", "stdout", number, 1, time.monotonic(), wall_time)


class MetricReporter:
    """One pipeline (parser -> sinks) fed line by line from any thread, under a lock."""

    def __init__(self, jsonl_path: Union[str, Path], *, parser: str = "caffe", year: Optional[int] = None,
                 sinks_config=None, clock: Callable[[], float] = time.time) -> None:
        from ....config import RunConfig
        from ....parsers import ParserOptions
        from ....parsers.select import build_parser
        from ....run.build import build_sinks
        from ....sinks.jsonl import JsonlSink
        from ....stream.pipeline import Pipeline

        cfg = sinks_config if sinks_config is not None else RunConfig.from_env().sinks
        # The year glog leaves out: the one the monitor starts in, advanced when the month goes back
        # (a run across New Year); the original assumed the current year for every line.
        self.year = year if year is not None else time.localtime(clock()).tm_year
        self.path = str(cfg.jsonl or jsonl_path)
        sinks = build_sinks(cfg, jsonl=JsonlSink(self.path))
        self._pipeline = Pipeline(build_parser(parser, ParserOptions(year=self.year)), sinks=sinks)
        self._clock = clock
        self._lock = threading.Lock()
        self._line = 0
        self._closed = False
        _OPEN.add(self)

    def feed(self, line: Line) -> None:
        """Parse one line; its events go to the sinks."""
        with self._lock:
            if self._closed:
                return
            self._line += 1
            self._pipeline.feed(block_of(text_of(line), self._line, self._clock()))

    def records(self, events: Sequence[Event]) -> None:
        """Records made without a parser (MXNet's callbacks), to the same sinks."""
        with self._lock:
            if not self._closed:
                self._pipeline.records(events)

    def flush(self) -> None:
        with self._lock:
            if not self._closed:
                self._pipeline.tick()

    def close(self) -> None:
        """End of the run: what the parser held, then every sink flushed and closed. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pipeline.finish()
        _OPEN.discard(self)


@atexit.register
def _close_all() -> None:
    """Records are not lost at exit: every reporter still open is closed (its sinks flushed)."""
    for reporter in list(_OPEN):
        try:
            reporter.close()
        except Exception:  # at exit, one reporter's failure must not keep the others from closing
            log.exception("closing a metric reporter at exit")
