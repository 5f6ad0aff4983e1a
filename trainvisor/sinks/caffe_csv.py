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
import tempfile
from typing import IO, Optional, Sequence

from ..events import Event, Metric, PHASE_TRAIN

__all__ = ["CaffeCsvSink"]

# Names the Caffe parser gives to values that are not net outputs.
_LR = "lr"
_NOT_OUTPUTS = frozenset({"total_loss", "iter_per_sec", _LR})
_FIXED = ("NumIters", "Seconds", "LearningRate")

try:  # repr() of each number in C, built with the Caffe speedups (setup.py)
    from ..parsers._caffe_speedups import csv_row as _c_csv_row
except ImportError:  # pragma: no cover - depends on the build
    _c_csv_row = None
if os.environ.get("TRAINVISOR_PURE_PYTHON"):
    _c_csv_row = None
_NO_ROW = object()


def _fmt(v: Optional[float]) -> str:
    return "" if v is None else repr(float(v))


class _Table:
    """One output table, written row by row to a temporary file.

    The current row is kept as plain attributes (this runs once per metric: a
    dense log has a million of them); finished rows are formatted into a list
    that is written out in batches.
    """

    def __init__(self, final_path: str) -> None:
        self.final_path = final_path
        self.columns: dict[str, int] = {}
        self.rows = 0
        self._tmp: Optional[IO[str]] = None
        self._lines: list[str] = []
        self._first: Optional[list] = None  # held back until the second row brings an lr
        self.cur_key: object = _NO_ROW
        self._cur: Optional[list] = None  # [iteration, seconds, lr, {col_index: value}]

    def start_row(self, key: object, iteration: Optional[int], seconds: Optional[float], lr: float) -> dict:
        if self._cur is not None:
            self._push()
        self.cur_key = key
        values: dict[int, float] = {}
        self._cur = [iteration, seconds, lr, values]
        return values

    def column(self, name: str) -> int:
        idx = self.columns.get(name)
        if idx is None:
            idx = self.columns[name] = len(self.columns)
        return idx

    def _push(self) -> None:
        row = self._cur
        self._cur = None
        self.cur_key = _NO_ROW
        self.rows += 1
        if self.rows == 1:
            self._first = row
            return
        if self._first is not None:
            first, self._first = self._first, None
            if isinstance(first[2], float) and math.isnan(first[2]):
                first[2] = row[2]
            self._format(first)
        self._format(row)

    def _format(self, row: list) -> None:
        it, seconds, lr, values = row
        cells = [it, seconds, lr]
        if values:
            get = values.get
            cells.extend(map(get, range(max(values) + 1)))
        line = _c_csv_row(cells) if _c_csv_row is not None else NotImplemented
        if line is NotImplemented:
            line = ",".join(map(_fmt, cells))
        lines = self._lines
        lines.append(line)
        if len(lines) >= 4096:
            self._spill()

    def _spill(self) -> None:
        if self._tmp is None:
            d = os.path.dirname(self.final_path) or "."
            self._tmp = tempfile.TemporaryFile("w+", dir=d, encoding="utf-8", newline="")
        self._lines.append("")
        self._tmp.write("\r\n".join(self._lines))
        self._lines = []

    def close(self) -> bool:
        """Write the final file; False when the table has no rows (no file written)."""
        if self._cur is not None:
            self._push()
        if self._first is not None:
            self._format(self._first)
            self._first = None
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
            for line in self._tmp:
                n = line.count(",") + 1
                if n < width:
                    line = line[:-2] + "," * (width - n) + "\r\n"
                out.write(line)
        os.replace(tmp_final, self.final_path)
        self._tmp.close()
        return True


def _csv_cell(s: str) -> str:
    if any(c in s for c in ',"\r\n'):
        return '"' + s.replace('"', '""') + '"'
    return s


class CaffeCsvSink:
    """Sink for Caffe metrics that writes parse_log.py-style tables at close."""

    name = "caffe-csv"

    def __init__(self, outdir: str | os.PathLike, basename: str) -> None:
        outdir = os.fspath(outdir)
        os.makedirs(outdir, exist_ok=True)
        self.train_path = os.path.join(outdir, basename + ".train")
        self.test_path = os.path.join(outdir, basename + ".test")
        self._train = _Table(self.train_path)
        self._test = _Table(self.test_path)
        # Old Caffe prints no "Train net output" lines: then the train table is
        # built from the "Iteration N, loss = L" values, as column "loss".
        self._loss_only: Optional[_Table] = _Table(self.train_path)
        self._lr = float("nan")
        self.written: list[str] = []

    def write(self, events: Sequence[Event]) -> None:
        train, test = self._train, self._test
        lr = self._lr
        for ev in events:
            if type(ev) is not Metric:
                continue
            name, value, iteration, phase, test_net, seconds = ev[:6]
            if phase == PHASE_TRAIN:
                if name in _NOT_OUTPUTS:
                    if name == _LR:
                        lr = value
                    elif name == "total_loss" and self._loss_only is not None:
                        t = self._loss_only
                        values = t.start_row(iteration, iteration, seconds, lr) if iteration != t.cur_key else t._cur[3]
                        values[t.column("loss")] = value
                    continue
                if self._loss_only is not None:
                    self._loss_only = None
                table = train
            else:
                table = test
                if test_net:
                    name = f"{name}#{test_net}"
            if iteration != table.cur_key:
                values = table.start_row(iteration, iteration, seconds, lr)
            else:
                values = table._cur[3]
            idx = table.columns.get(name)
            if idx is None:
                idx = table.column(name)
            values[idx] = value
        self._lr = lr

    def flush(self) -> None:
        pass

    def close(self) -> None:
        train = self._loss_only if self._loss_only is not None else self._train
        for table in (train, self._test):
            if table.close():
                self.written.append(table.final_path)
