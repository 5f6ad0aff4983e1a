"""Caffe's `tools/extra/parse_log.py` table layout, for the plotting scripts that read it.

Writes ``<name>.train`` and ``<name>.test``: NumIters, Seconds, LearningRate, then one
column per net output. The layout and values follow parse_log.py (NumIters as a
float, LearningRate = the last ``lr`` printed before the row's first output, the
first row's LearningRate taken from the second row, excel dialect), without its
failures: a table with one row is written, columns are the union of every row's
outputs (not those of the first row), rows are grouped by iteration, and the
year of glog timestamps rolls over at New Year.

Memory stays flat in the log's length: rows go to a temporary file as they
complete; columns only ever get appended, so at close the header is written and
rows that predate a new column are padded.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import IO, Callable, Optional, Sequence

from ..events import Event, Metric, PHASE_TRAIN

__all__ = ["CaffeCsvSink", "LR", "TOTAL_LOSS", "table_paths"]

# Names the Caffe parser gives to values that are not net outputs.
LR = "lr"
TOTAL_LOSS = "total_loss"
_NOT_OUTPUTS = frozenset({TOTAL_LOSS, "iter_per_sec", LR})
_FIXED = ("NumIters", "Seconds", "LearningRate")

try:  # the same loop and row formatting in C, built at install time when a compiler is there (setup.py)
    from ._format import csv_pivot as _c_pivot
    from ._format import csv_row as _c_csv_row
except ImportError:  # pragma: no cover - depends on the build
    _c_pivot = _c_csv_row = None
_FAST = not os.environ.get("TRAINVISOR_PURE_PYTHON")  # TRAINVISOR_PURE_PYTHON=1: the Python rows
_NO_ROW = object()


def table_paths(outdir: str | os.PathLike, basename: str) -> tuple[str, str]:
    """``OUTDIR/<basename>.train`` and ``.test``, the names both of Caffe's parsers give their
    tables; OUTDIR is created."""
    outdir = os.fspath(outdir)
    os.makedirs(outdir, exist_ok=True)
    return os.path.join(outdir, basename + ".train"), os.path.join(outdir, basename + ".test")


def _fmt(v: Optional[float]) -> str:
    return "" if v is None else repr(float(v))


class _Row:
    """One table row while it is being filled: its key, time, learning rate and
    values by column index."""

    __slots__ = ("iteration", "seconds", "lr", "values")

    def __init__(self, iteration: object, seconds: Optional[float], lr: float) -> None:
        self.iteration = iteration
        self.seconds = seconds
        self.lr = lr
        self.values: dict[int, float] = {}


class _Table:
    """One output table, written row by row to a temporary file.

    Rows are padded to the columns known when they are formatted; `narrowest`
    (the smallest such width, -1 before any) tells close() whether any row still
    needs padding for a column that appeared later.
    """

    def __init__(self, final_path: str) -> None:
        self.final_path = final_path
        self.key: object = _NO_ROW
        self.current: Optional[_Row] = None
        self.columns: dict[str, int] = {}
        self.rows = 0
        self.first: Optional[_Row] = None  # held back until the second row brings a learning rate
        self.lines: list[str] = []
        self.narrowest = -1
        self._tmp: Optional[IO[str]] = None

    def values_for(self, key: object, seconds: Optional[float], lr: float) -> dict:
        """The current row's values, starting a new row when `key` (the iteration) changes."""
        if key == self.key:
            return self.current.values  # type: ignore[union-attr]
        if self.current is not None:
            self._push()
        self.current = _Row(key, seconds, lr)
        self.key = key
        return self.current.values

    def set(self, values: dict, name: str, value: float) -> None:
        columns = self.columns
        idx = columns.get(name)
        if idx is None:
            idx = columns[name] = len(columns)
        values[idx] = value

    def _push(self) -> None:
        row, self.current, self.key = self.current, None, _NO_ROW
        self.rows += 1
        if self.rows == 1:
            self.first = row
            return
        first = self.first
        if first is not None:
            self.first = None
            if isinstance(first.lr, float) and math.isnan(first.lr):
                first.lr = row.lr  # type: ignore[union-attr]
            self.lines.append(self._format(first))
        self.lines.append(self._format(row))  # type: ignore[arg-type]

    def _format(self, row: _Row) -> str:
        values = row.values
        width = max(len(self.columns), max(values) + 1 if values else 0)
        if self.narrowest < 0 or width < self.narrowest:
            self.narrowest = width
        cells = [row.iteration, row.seconds, row.lr]
        cells.extend(map(values.get, range(width)))
        line = _c_csv_row(cells) if _FAST and _c_csv_row is not None else NotImplemented
        return _format_cells(cells) if line is NotImplemented else line

    def spill_if_large(self, max_entries: int) -> None:
        """Pending lines go to the temporary file in batches: memory stays flat."""
        if len(self.lines) >= max_entries:
            self._spill()

    def _spill(self) -> None:
        if self._tmp is None:
            d = os.path.dirname(self.final_path) or "."
            self._tmp = tempfile.TemporaryFile("w+", dir=d, encoding="utf-8", newline="")
        lines = self.lines
        lines.append("")
        self._tmp.write("\r\n".join(lines))
        self.lines = []

    def close(self) -> bool:
        """Write the final file; False when the table has no rows (no file written)."""
        if self.current is not None:
            self._push()
        if self.first is not None:
            self.lines.append(self._format(self.first))
            self.first = None
        if self.rows == 0:
            return False
        self._spill()
        width = len(_FIXED) + len(self.columns)
        header = list(_FIXED) + sorted(self.columns, key=self.columns.__getitem__)
        tmp_final = self.final_path + ".tmp"
        with open(tmp_final, "w", encoding="utf-8", newline="") as out:
            out.write(",".join(_csv_cell(h) for h in header) + "\r\n")
            assert self._tmp is not None
            self._tmp.seek(0)
            if len(_FIXED) + self.narrowest >= width:
                shutil.copyfileobj(self._tmp, out, 1 << 20)  # every row is already full width
            else:
                for line in self._tmp:
                    n = line.count(",") + 1
                    if n < width:
                        line = line[:-2] + "," * (width - n) + "\r\n"
                    out.write(line)
        os.replace(tmp_final, self.final_path)
        self._tmp.close()
        return True


def _format_cells(cells: list) -> str:
    return ",".join(map(_fmt, cells))


def _csv_cell(s: str) -> str:
    if any(c in s for c in ',"\r\n'):
        return '"' + s.replace('"', '""') + '"'
    return s


class _PivotState:
    """Where the pivot stands between writes; the C loop reads and writes these fields by name.

    `loss_only`: the train table built from "Iteration N, loss = L" values, kept
    until the first "Train net output" line shows the log has real outputs.
    """

    __slots__ = ("lr", "train", "test", "loss_only")

    def __init__(self, train: _Table, test: _Table, loss_only: Optional[_Table]) -> None:
        self.lr: object = float("nan")  # the last lr printed
        self.train = train
        self.test = test
        self.loss_only = loss_only


@dataclass(frozen=True)
class _PivotEnv:
    """The types and fallback the C loop works with, by name."""

    metric: type
    row: type
    no_row: object
    format_cells: Callable[[list], str]


_PIVOT_ENV = _PivotEnv(Metric, _Row, _NO_ROW, _format_cells)


class CaffeCsvSink:
    """Sink for Caffe metrics that writes parse_log.py-style tables at close."""

    name = "caffe-csv"

    def __init__(self, outdir: str | os.PathLike, basename: str) -> None:
        self.train_path, self.test_path = table_paths(outdir, basename)
        # Old Caffe prints no "Train net output" lines: then the train table is
        # built from the "Iteration N, loss = L" values, as column "loss".
        self._state = _PivotState(_Table(self.train_path), _Table(self.test_path), _Table(self.train_path))
        self.written: list[str] = []

    def write(self, events: Sequence[Event]) -> None:
        state = self._state
        if _FAST and _c_pivot is not None:
            _c_pivot(events, state, _PIVOT_ENV)
            max_entries = 32  # the C loop adds one entry of many rows per call
        else:
            self._pivot(events)
            max_entries = 4096  # one row per entry
        for table in (state.train, state.test, state.loss_only):
            if table is not None:
                table.spill_if_large(max_entries)

    def _pivot(self, events: Sequence[Event]) -> None:
        """The reference loop: _pivot.c implements exactly this."""
        state = self._state
        train, test = state.train, state.test
        lr = state.lr
        for ev in events:
            if type(ev) is not Metric:
                continue
            name, value, iteration, phase, test_net, seconds = ev[:6]
            if phase == PHASE_TRAIN:
                if name in _NOT_OUTPUTS:
                    if name == LR:
                        lr = value
                    elif name == TOTAL_LOSS and state.loss_only is not None:
                        t = state.loss_only
                        t.set(t.values_for(iteration, seconds, lr), "loss", value)
                    continue
                state.loss_only = None
                table = train
            else:
                table = test
                if test_net:
                    name = f"{name}#{test_net}"
            table.set(table.values_for(iteration, seconds, lr), name, value)
        state.lr = lr

    def flush(self) -> None:
        pass

    def close(self) -> None:
        state = self._state
        train = state.loss_only if state.loss_only is not None else state.train
        for table in (train, state.test):
            if table.close():
                self.written.append(table.final_path)
