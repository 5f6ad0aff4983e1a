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


def _fmt(v: Optional[float]) -> str:
    if v is None:
        return ""
    return repr(float(v))


class _Table:
    """One output table, written row by row to a temporary file."""

    def __init__(self, final_path: str) -> None:
        self.final_path = final_path
        self.columns: dict[str, int] = {}
        self.rows = 0
        self._tmp: Optional[IO[str]] = None
        self._first: Optional[list] = None  # held back until the second row brings an lr
        self._cur_key: object = None
        self._cur: Optional[list] = None  # [iteration, seconds, lr, {col_index: value}]

    def add(self, key: object, iteration: Optional[int], seconds: Optional[float], lr: float, column: str, value: float) -> None:
        if key != self._cur_key or self._cur is None:
            self._push()
            self._cur_key = key
            self._cur = [iteration, seconds, lr, {}]
        idx = self.columns.get(column)
        if idx is None:
            idx = self.columns[column] = len(self.columns)
        self._cur[3][idx] = value

    def _push(self) -> None:
        row = self._cur
        if row is None:
            return
        self._cur = None
        self.rows += 1
        if self.rows == 1:
            self._first = row
            return
        if self._first is not None:
            first, self._first = self._first, None
            if isinstance(first[2], float) and math.isnan(first[2]):
                first[2] = row[2]
            self._write(first)
        self._write(row)

    def _write(self, row: list) -> None:
        if self._tmp is None:
            d = os.path.dirname(self.final_path) or "."
            self._tmp = tempfile.TemporaryFile("w+", dir=d, encoding="utf-8", newline="")
        it, seconds, lr, values = row
        cells = [_fmt(it), _fmt(seconds), _fmt(lr)]
        if values:
            width = max(values) + 1
            cells.extend(_fmt(values[i]) if i in values else "" for i in range(width))
        self._tmp.write(",".join(cells) + "\r\n")

    def close(self) -> bool:
        """Write the final file; False when the table has no rows (no file written)."""
        self._push()
        if self._first is not None:
            self._write(self._first)
            self._first = None
        if self.rows == 0:
            return False
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
        for ev in events:
            if type(ev) is not Metric:
                continue
            name = ev.name
            if ev.phase == PHASE_TRAIN:
                if name in _NOT_OUTPUTS:
                    if name == _LR:
                        self._lr = ev.value
                    elif name == "total_loss" and self._loss_only is not None:
                        self._loss_only.add(ev.iteration, ev.iteration, ev.seconds, self._lr, "loss", ev.value)
                    continue
                if self._loss_only is not None:
                    self._loss_only = None
                self._train.add(ev.iteration, ev.iteration, ev.seconds, self._lr, name, ev.value)
            else:
                column = name if not ev.test_net else f"{name}#{ev.test_net}"
                self._test.add(ev.iteration, ev.iteration, ev.seconds, self._lr, column, ev.value)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        train = self._loss_only if self._loss_only is not None else self._train
        for table in (train, self._test):
            if table.close():
                self.written.append(table.final_path)
