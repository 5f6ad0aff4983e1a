"""One followed metric file (`--follow GLOB`): its new records read as `Metric`s, each once.

The file is opened by its path at each read, so a file replaced by a new one (another inode) is
read from its start. What a file holds is taken as lines numbered from 1; `done` is the number of
lines of it already reported, and a line is reported only past it. A file rewritten in place
keeps that count: Lightning's CSVLogger rewrites `metrics.csv` with a wider header when a new
column appears (the rows it wrote before, then the new ones), so its old rows are at the same
lines and are not reported twice. A rewrite is seen as another inode, a file shorter than what
was read, or a first line that is no longer the one read (the header, for a CSV).

Only whole lines are read (a line still being written waits for its newline), except at the end
of a child (`final`: the training has exited, its last line is whole); a restarted training that
then writes that line's newline adds no line.
A trainer_state.json is one document rewritten in place: read whole when it changed, its
`log_history` entries past the ones reported.
"""
from __future__ import annotations

import os
from typing import Optional

from ..events import Metric
from ..parsers.metricfiles import (KIND_CSV, KIND_DOCUMENT, csv_header, csv_row_metrics, json_line_metrics,
                                   record_metrics, trainer_state_history)

__all__ = ["FollowedFile", "HEAD_BYTES", "READ_LIMIT"]

HEAD_BYTES = 4096  # of the first line, compared at each read to notice a rewrite
READ_LIMIT = 16 * 1024 * 1024  # read at once; a larger backlog is read over several sweeps


class FollowedFile:
    """`path` followed as `source` (the records' stream), read as `kind` (parsers.metricfiles)."""

    def __init__(self, path: str, source: str, kind: str, *, done: int = 0) -> None:
        self.path, self.source, self.kind = path, source, kind
        self.done = done  # lines (document: log_history entries) already reported
        self._ident: Optional[tuple[int, int]] = None
        self._offset = 0  # bytes of whole lines read from the current content
        self._lines = 0  # lines of the current content read
        self._head = b""  # its first line (up to HEAD_BYTES), once read
        self._header: Optional[tuple[str, ...]] = None
        self._stamp: Optional[tuple] = None  # the document's (inode, size, mtime) last read whole
        self._open_end = False  # the last line read had no newline (taken at a run's end)

    def read(self, wall_time: float, *, final: bool = False) -> list[Metric]:
        """The metrics of the lines written since the last read (none when the file is gone)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return []
        try:
            st = os.fstat(fd)
            if self.kind == KIND_DOCUMENT:
                return self._read_document(fd, st, wall_time)
            if self._rewritten(fd, st):
                self._offset, self._lines, self._head, self._header, self._open_end = 0, 0, b"", None, False
            self._ident = (st.st_dev, st.st_ino)
            size = min(st.st_size - self._offset, READ_LIMIT)
            data = os.pread(fd, size, self._offset) if size > 0 else b""
        finally:
            os.close(fd)
        if self._open_end and data:  # a last line taken at an end: its newline, if it comes, is no new line
            self._open_end = False
            if data.startswith(b"\n"):
                data, self._offset = data[1:], self._offset + 1
        whole = data if final and size < READ_LIMIT else data[:data.rfind(b"\n") + 1]
        if not whole:
            return []
        self._open_end = not whole.endswith(b"\n")
        if not self._head:
            newline = whole.find(b"\n")
            self._head = whole[:min(newline + 1 if newline >= 0 else len(whole), HEAD_BYTES)]
        self._offset += len(whole)
        return self._metrics(whole, wall_time)

    def _rewritten(self, fd: int, st: os.stat_result) -> bool:
        if self._ident is None:
            return False
        if self._ident != (st.st_dev, st.st_ino) or st.st_size < self._offset:
            return True
        return bool(self._head) and os.pread(fd, len(self._head), 0) != self._head

    def _metrics(self, whole: bytes, wall_time: float) -> list[Metric]:
        out: list[Metric] = []
        rows = whole.split(b"\n")
        if whole.endswith(b"\n"):
            rows.pop()
        csv_file = self.kind == KIND_CSV
        for raw in rows:
            self._lines += 1
            number = self._lines
            text = raw.decode("utf-8", "replace").rstrip("\r")
            if csv_file and self._header is None:
                self._header = csv_header(text)  # the first line, read again after a rewrite
                self.done = max(self.done, number)
                continue
            if number <= self.done or not text.strip():
                continue
            self.done = number
            if csv_file:
                out += csv_row_metrics(self._header, text, line=number, source=self.source, wall_time=wall_time)
            else:
                out += json_line_metrics(text, line=number, source=self.source, wall_time=wall_time) or ()
        return out

    def _read_document(self, fd: int, st: os.stat_result, wall_time: float) -> list[Metric]:
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if stamp == self._stamp:
            return []
        history = trainer_state_history(os.pread(fd, st.st_size, 0).decode("utf-8", "replace"))
        if history is None:  # half written: read again at the next sweep
            return []
        self._stamp = stamp
        out: list[Metric] = []
        for number, entry in enumerate(history[self.done:], self.done + 1):
            if isinstance(entry, dict):
                out += record_metrics(entry, line=number, source=self.source, wall_time=wall_time)
        self.done = max(self.done, len(history))
        return out
