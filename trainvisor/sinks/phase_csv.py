"""Per-phase CSV sink: `train.csv`, `val.csv`, `test.csv` in one folder, a column per metric.

Each row is one step of one phase: the metrics that share an (iteration, epoch) (and a rank),
in columns `iteration, epoch, seconds`, then `rank` when a metric carried one, then one column
per metric name in the order the names first appeared. A Caffe test net other than the first
(`test_net` 1, 2...) gets its own file, `test1.csv`, as it gets its own tags in TensorBoard.

A name can first appear long after the header was written (detection metrics after the first
evaluation, a metric logged every N steps). The file is written as rows complete, so it can be
read, or plotted, while the training runs, and memory stays bounded (one open row per phase and
rank); when a row brings a column the header lacks, the file is rewritten once with the wider
header (copied line by line to a temporary file, then renamed over it, so a reader never sees a
half-written table). That costs one copy per new column, and columns are few.

A row is complete when its phase (and rank) moves to another (iteration, epoch), or when a
name it already holds comes again (the same step logged twice: a restarted training; the second
is a row of its own, never an overwritten value). Running values (mid-epoch: a progress bar's
postfix) are left out: a row is a completed step or epoch. Values are written exactly (repr:
the float that was parsed, `nan`, `inf`), read back with `float()`.

The per-metric loop (`write`, `_Table.add`, `_Table.emit`) runs in C when the sinks' extension
is built (`_phase_csv.c`: 3-6x less per metric, bench/phase_csv_sink.py; the sink runs inline on
the pipeline thread); the Python loop below is the reference it matches byte for byte, and the
fallback (extension missing, or TRAINVISOR_PURE_PYTHON=1). Widening, a file's opening and close
stay Python's.
"""
from __future__ import annotations

import csv
import io
import os
from typing import IO, Any, Callable, NamedTuple, Optional, Sequence

from ..events import Metric

try:
    from ._format import phase_csv_write as _c_write
except ImportError:  # not built (no compiler at install): the Python loop
    _c_write = None
_FAST = not os.environ.get("TRAINVISOR_PURE_PYTHON")  # TRAINVISOR_PURE_PYTHON=1: the Python loop

__all__ = ["PhaseCsvSink", "BASE_COLUMNS"]

BASE_COLUMNS = ("iteration", "epoch", "seconds")


def _num(v: Optional[float]) -> str:
    """A number as the table shows it: integral epochs as integers, others exactly."""
    if v is None:
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return repr(v)


class _Row:
    __slots__ = ("key", "rank", "seconds", "values")

    def __init__(self, m: Metric) -> None:
        self.key = (m.iteration, m.epoch)
        self.rank = m.rank
        self.seconds = m.seconds
        self.values: dict[str, float] = {}


class _Table:
    """One phase's file: its header so far, and the rows still open (one per rank).

    Written per row, on the pipeline thread: the row's cells are placed by a column index kept
    with the header (no dict per row, one csv writer per file), ~4x less than building each row
    by column name."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.columns: list[str] = []
        self.index: dict[str, int] = {}  # column -> its position in `columns`
        self.fh: Optional[IO[str]] = None
        self.out: Any = None  # csv writer of `fh`
        self.open: dict[Optional[int], _Row] = {}

    def add(self, m: Metric) -> None:
        row = self.open.get(m.rank)
        if row is not None and (row.key != (m.iteration, m.epoch) or m.name in row.values):
            self.emit(row)
            row = None
        if row is None:
            row = self.open[m.rank] = _Row(m)
        if row.seconds is None:
            row.seconds = m.seconds
        row.values[m.name] = m.value

    def emit(self, row: _Row) -> None:
        del self.open[row.rank]
        index = self.index
        missing = [name for name in row.values if name not in index]
        if row.rank is not None and "rank" not in index:
            missing.insert(0, "rank")
        if missing or self.fh is None:
            self._widen(missing)
        self.out.writerow(self.cells(row))

    def cells(self, row: _Row) -> list[str]:
        """The row's cells under the current header (every column of the row is in it)."""
        index = self.index
        cells = [""] * len(self.columns)
        cells[0], cells[1], cells[2] = _num(row.key[0]), _num(row.key[1]), _num(row.seconds)
        if row.rank is not None:
            cells[index["rank"]] = str(row.rank)
        for name, value in row.values.items():
            cells[index[name]] = repr(value)
        return cells

    def close(self) -> None:
        for row in sorted(self.open.values(), key=lambda r: -1 if r.rank is None else r.rank):
            self.emit(row)
        if self.fh is not None:
            self.fh.close()
            self.fh = None

    def _widen(self, missing: list[str]) -> None:
        """The header with `missing` added (`rank` right after the base columns); the rows
        written so far copied under it, their new cells empty."""
        old = self.columns
        new = [c for c in old if c in BASE_COLUMNS] or list(BASE_COLUMNS)
        if "rank" in old or "rank" in missing:
            new.append("rank")
        new += [c for c in old + missing if c not in new]
        self.columns = new
        self.index = {c: i for i, c in enumerate(new)}
        if self.fh is None:
            self.fh = open(self.path, "w", encoding="utf-8", newline="")
            self.out = csv.writer(self.fh, lineterminator="\n")
            self.out.writerow(new)
            return
        self.fh.close()
        where = [old.index(c) if c in old else None for c in new]
        tmp = self.path + ".tmp"
        with open(self.path, encoding="utf-8", newline="") as src, \
                open(tmp, "w", encoding="utf-8", newline="") as dst:
            out = csv.writer(dst, lineterminator="\n")
            out.writerow(new)
            rows = csv.reader(src)
            next(rows, None)  # the old header
            for r in rows:
                out.writerow(["" if i is None else r[i] for i in where])
        os.replace(tmp, self.path)
        self.fh = open(self.path, "a", encoding="utf-8", newline="")
        self.out = csv.writer(self.fh, lineterminator="\n")


def _quoted_row(table: _Table, row: _Row) -> str:
    """The line csv.writer writes for the row: the C loop's way for a cell that needs quoting,
    so the csv module's rule (which differs between Python versions) stays the only one."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(table.cells(row))
    return out.getvalue()


class _CsvEnv(NamedTuple):
    """What the C loop takes from this module; it reads the sink's tables and rows by name
    (`_by_phase`, `_table`; a _Table's open, index, columns, fh, emit; a _Row's slots)."""

    metric: type
    row: type
    num: Callable[[Optional[float]], str]
    format_row: Callable[[_Table, _Row], str]


_CSV_ENV = _CsvEnv(Metric, _Row, _num, _quoted_row)


class PhaseCsvSink:
    """Writes the Metrics it is given into DIR/PHASE.csv (see the module's docstring); other
    events are skipped. The files are started afresh (a run's tables, not an append log)."""

    name = "csv"

    def __init__(self, dir: str) -> None:
        self.dir = os.fspath(dir)
        os.makedirs(self.dir, exist_ok=True)  # an unwritable dir is the user's to fix, before the child starts
        self._tables: dict[str, _Table] = {}
        self._by_phase: dict[tuple[str, Optional[int]], _Table] = {}  # (phase, test net) -> its table

    def paths(self) -> tuple[str, ...]:
        """The files started so far, in the order their phases first appeared."""
        return tuple(t.path for t in self._tables.values())

    def write(self, events: Sequence[object]) -> None:
        if _FAST and _c_write is not None:
            _c_write(events, self, _CSV_ENV)
        else:
            self._write(events)

    def _write(self, events: Sequence[object]) -> None:
        """The reference loop: _phase_csv.c implements exactly this (and _Table.add, emit)."""
        tables = self._by_phase
        for m in events:
            if type(m) is not Metric or m.running:
                continue
            table = tables.get((m.phase, m.test_net))
            if table is None:
                table = self._table(m.phase, m.test_net)
            table.add(m)

    def _table(self, phase: str, test_net: Optional[int]) -> _Table:
        label = phase if not test_net else f"{phase}{test_net}"
        table = self._tables.get(label)
        if table is None:
            table = self._tables[label] = _Table(os.path.join(self.dir, label + ".csv"))
        self._by_phase[(phase, test_net)] = table
        return table

    def flush(self) -> None:
        for t in self._tables.values():
            if t.fh is not None:
                t.fh.flush()

    def close(self) -> None:
        for t in self._tables.values():
            t.close()
