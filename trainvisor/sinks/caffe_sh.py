"""Caffe's `tools/extra/parse_log.sh` tables, the files `plot_training_log.py` reads.

parse_log.sh writes ``<name>.train`` (``#Iters Seconds TrainingLoss LearningRate``) and
``<name>.test`` (``#Iters Seconds TestAccuracy TestLoss``): a header line, then rows aligned
by ``column -t`` (util-linux: every column but the last padded to its widest cell plus two
spaces; a row short of cells is padded as if they were empty). Its rows, reproduced here:

- train: one per ``Iteration N, loss = L`` line: N, the line's seconds, L, and the ``lr``
  printed for the same iteration (none after the last loss line, so that row has three cells,
  as parse_log.sh's does).
- test: one per test pass (``Iteration N, Testing net (#j)``) with outputs: N, the seconds of
  the ``Testing net`` line (not of the outputs: passes can last minutes), then the pass's
  outputs #0 and #1, whatever their names are.
- seconds: since the ``Solving`` line, printed ``%f``; values as glog printed them (``%g``),
  or the shortest text that gives the same number when ``%g`` would lose digits.

parse_log.sh pairs its columns by position (every ``Test net output #0`` value, every ``lr``
value), so one missing line shifts every later row; rows here are paired by iteration and pass.

The time of a ``Testing net`` line is no metric: `observe` (shown every block by the parser
`watching` returns) notes the glog times of each pass's ``Testing net`` line and of its first
output line, and the row's seconds are the output's seconds minus that difference. Without it
(a sink passed to a run alone), test rows take the seconds of their first output, as
parse_log.py's do.

Rows go to temporary files as they complete, with each column's width: memory stays flat.
"""
from __future__ import annotations

import logging
import math
import os
import re
import tempfile
from collections import deque
from typing import IO, Any, Callable, Optional, Sequence

from ..events import Event, LineBlock, Metric, PHASE_TEST, PHASE_TRAIN
from .caffe_csv import LR, TOTAL_LOSS, table_paths

__all__ = ["CaffeShSink", "TRAIN_HEADER", "TEST_HEADER", "format_value"]

log = logging.getLogger("trainvisor.sinks.caffe_sh")

TRAIN_HEADER = "#Iters Seconds TrainingLoss LearningRate"
TEST_HEADER = "#Iters Seconds TestAccuracy TestLoss"
_TEST_OUTPUTS = 2  # parse_log.sh keeps "Test net output #0" and "#1"
_GAP = "  "  # column -t's separator
# glog's prefix: level, MMDD, HH:MM:SS.micros (a rank prefix may stand before it)
_STAMP = re.compile(r"[IWEF](\d{4}) (\d\d):(\d\d):(\d\d)\.(\d{6}) ")
_DAY_US = 86_400 * 1_000_000


def format_value(v: float) -> str:
    """A value as Caffe printed it: C++ streams print floats as ``%g``; a value with more digits
    than ``%g`` keeps gets its shortest exact text instead, so the plotted number is the same."""
    if v != v:  # NaN: glibc prints its sign bit, Python never does
        return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    text = "%g" % v
    return text if float(text) == v else repr(v)


def _seconds(s: Optional[float]) -> str:
    return "nan" if s is None else "%f" % s


def _stamp(text: str, start: int, end: int) -> Optional[tuple[str, int]]:
    """(MMDD, microseconds of the day) of the glog line text[start:end], None without a glog time."""
    m = _STAMP.search(text, start, end)
    if m is None:
        return None
    day, hh, mm, ss, us = m.groups()
    return day, ((int(hh) * 60 + int(mm)) * 60 + int(ss)) * 1_000_000 + int(us)


class _Pass:
    """One ``Testing net`` line seen by `observe`, and the first output line after it."""

    __slots__ = ("line", "stamp", "output_line", "output_stamp")

    def __init__(self, line: int, stamp: Optional[tuple[str, int]]) -> None:
        self.line = line
        self.stamp = stamp
        self.output_line = -1
        self.output_stamp: Optional[tuple[str, int]] = None

    def seconds_of(self, m: Metric) -> Optional[float]:
        """The pass's start in the parser's seconds: the output's seconds minus the glog time
        between the two lines (a pass is assumed shorter than a day)."""
        if m.line != self.output_line or m.seconds is None or self.stamp is None or self.output_stamp is None:
            return m.seconds
        delta = self.output_stamp[1] - self.stamp[1]
        if self.output_stamp[0] != self.stamp[0]:
            delta += _DAY_US
        return (round(m.seconds * 1_000_000) - delta) / 1_000_000


class _ColumnTable:
    """One table as ``column -t`` aligns it: rows of cells spooled to a temporary file, each
    column's width kept, the aligned text written at close."""

    def __init__(self, path: str, header: str) -> None:
        self.path = path
        self.header = header
        self.rows = 0
        self.widths: list[int] = []
        self._tmp: Optional[IO[str]] = None

    def add(self, cells: Sequence[str]) -> None:
        if self._tmp is None:
            self._tmp = tempfile.TemporaryFile("w+", dir=os.path.dirname(self.path) or ".", encoding="utf-8")
        widths = self.widths
        for i, cell in enumerate(cells):
            if i == len(widths):
                widths.append(len(cell))
            elif len(cell) > widths[i]:
                widths[i] = len(cell)
        self._tmp.write("\t".join(cells) + "\n")
        self.rows += 1

    def close(self) -> None:
        """Write the header and the aligned rows (the header alone without rows, as parse_log.sh)."""
        tmp_path = self.path + ".tmp"
        pads = self.widths[:-1]
        with open(tmp_path, "w", encoding="utf-8", newline="\n") as out:
            out.write(self.header + "\n")
            if self._tmp is not None:
                self._tmp.seek(0)
                for line in self._tmp:
                    cells = line[:-1].split("\t")
                    out.write("".join(_cell(cells, i).ljust(w) + _GAP for i, w in enumerate(pads)))
                    out.write(_cell(cells, len(pads)) + "\n")
                self._tmp.close()
        os.replace(tmp_path, self.path)


def _cell(cells: list[str], i: int) -> str:
    return cells[i] if i < len(cells) else ""


class _Watching:
    """A parser that shows each block to `observe` first; anything else is the parser's own."""

    def __init__(self, parser: Any, observe: Callable[[LineBlock], None]) -> None:
        self._parser = parser
        self._observe = observe

    def __getattr__(self, name: str) -> Any:  # name, stamps_stream, ...: the pipeline reads them
        return getattr(self._parser, name)

    def feed(self, block: LineBlock) -> list[Event]:
        try:
            self._observe(block)
        except Exception:  # a bug here must not lose the block's metrics: test rows keep their outputs' time
            log.exception("caffe-sh: cannot time test passes; their rows take their outputs' seconds")
            self._observe = _ignore
        return self._parser.feed(block)

    def finish(self) -> list[Event]:
        return self._parser.finish()


def _ignore(block: LineBlock) -> None:
    pass


class CaffeShSink:
    """Sink for Caffe metrics that writes parse_log.sh-style tables at close; give the pipeline
    `sink.watching(parser)` as its parser for the test rows' exact seconds."""

    name = "caffe-sh"

    def __init__(self, outdir: str | os.PathLike, basename: str) -> None:
        self.train_path, self.test_path = table_paths(outdir, basename)
        self._train = _ColumnTable(self.train_path, TRAIN_HEADER)
        self._test = _ColumnTable(self.test_path, TEST_HEADER)
        self._loss_row: Optional[list[str]] = None  # waits for the lr of its iteration
        self._loss_iteration: object = None
        self._test_row: Optional[list[str]] = None
        self._test_key: object = None
        self._passes: deque[_Pass] = deque()  # seen by observe(), not yet reached by a metric
        self.written: list[str] = []

    @property
    def rows(self) -> int:
        return self._train.rows + self._test.rows

    def watching(self, parser: Any) -> "_Watching":
        """`parser` as the pipeline's parser, showing this sink each block before parsing it:
        the pipeline hands a block's metrics to sinks after, so each pass is known in time."""
        return _Watching(parser, self.observe)

    def observe(self, block: LineBlock) -> None:
        """Notes the glog time of each ``Testing net`` line and of the first output after it.
        Scans the block's text with str.find (not a per-line hook: a hook's LineRecords doubled
        the time of `parse --format sh` on a dense log)."""
        text, passes = block.text, self._passes
        limit = text.rfind("\n") + 1 if block.open_line else len(text)  # an open line comes again
        pos = counted = 0
        line = block.first_line
        while True:
            at = text.find("Testing net", pos, limit)
            output = -1
            if passes and passes[-1].output_line < 0:
                output = text.find("Test net output", pos, at if at >= 0 else limit)
                at = output if output >= 0 else at
            if at < 0:
                return
            start = text.rfind("\n", 0, at) + 1
            line += text.count("\n", counted, start)
            counted = start
            pos = text.find("\n", at, limit)
            pos = limit if pos < 0 else pos
            stamp = _stamp(text, start, pos)
            if output >= 0:
                passes[-1].output_line, passes[-1].output_stamp = line, stamp
            else:
                passes.append(_Pass(line, stamp))

    def write(self, events: Sequence[Event]) -> None:
        for ev in events:
            if type(ev) is not Metric:
                continue
            if ev.phase == PHASE_TRAIN:
                if ev.name == TOTAL_LOSS:
                    self._end_loss_row()
                    self._loss_row = [str(ev.iteration), _seconds(ev.seconds), format_value(ev.value)]
                    self._loss_iteration = ev.iteration
                elif ev.name == LR and self._loss_row is not None and ev.iteration == self._loss_iteration:
                    self._loss_row.append(format_value(ev.value))
                    self._end_loss_row()
            elif ev.phase == PHASE_TEST and ev.test_net is not None:  # a Caffe test net's output
                self._test_value(ev)

    def _end_loss_row(self) -> None:
        if self._loss_row is not None:
            self._train.add(self._loss_row)
            self._loss_row = None

    def _test_value(self, m: Metric) -> None:
        """A test output: a new row at a new pass (a ``Testing net`` line observe() saw before
        this output, or without observe() a new iteration or test net); outputs #0 and #1 kept."""
        current = None
        passes = self._passes
        while passes and passes[0].line < m.line:
            current = passes.popleft()
        key = (m.iteration, m.test_net, m.rank)
        if current is not None or key != self._test_key or self._test_row is None:
            self._end_test_row()
            seconds = current.seconds_of(m) if current is not None else m.seconds
            self._test_row = [str(m.iteration), _seconds(seconds)]
            self._test_key = key
        if len(self._test_row) < 2 + _TEST_OUTPUTS:
            self._test_row.append(format_value(m.value))

    def _end_test_row(self) -> None:
        if self._test_row is not None:
            self._test.add(self._test_row)
            self._test_row = None

    def flush(self) -> None:
        pass

    def close(self) -> None:
        """Both files are written, with a header only when empty, as parse_log.sh writes them."""
        self._end_loss_row()
        self._end_test_row()
        for table in (self._train, self._test):
            table.close()
            self.written.append(table.path)
