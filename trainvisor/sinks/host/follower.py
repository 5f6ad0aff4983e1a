"""A growing metrics.jsonl read as events: whole lines only, from an offset, up to a limit.

The run appends to the file as it parses (flushed at least once a second); the host reads what is
there, holds a line without its newline until the rest comes, and rebuilds the records as
`sinks.jsonl.read_jsonl` does (a metric's extra keys, the run's `attempt`, are not part of it),
and the checkpoint announcements as the pipeline gave them to its sinks (notices are the run's
own: they are not sinks' records). A batch of lines is decoded with one `json.loads` (a JSON
array of them): a third of the time of one call per line."""
from __future__ import annotations

import json
import logging
import os
from typing import Optional

from ...events import CheckpointEvent, Metric

try:
    from .._format import count_lines as _c_count
except ImportError:  # not built: the Python loop of `count_records`
    _c_count = None

__all__ = ["JsonlFollower"]

log = logging.getLogger("trainvisor.sinks")

_FIELDS = Metric._fields
_DEFAULTS = tuple(Metric._field_defaults.get(k) for k in _FIELDS)
_NOTICE = b'"event": "notice"'  # as the run writes it (sinks/jsonl.py, events.Notice)
COUNT_BLOCK = 1 << 22  # bytes read at a time when only counting
_CHECKPOINT = ("path", "kind", "iteration", "epoch", "line", "wall_time", "stream")


class JsonlFollower:
    """New whole lines of `path` from byte `offset` on; `read(limit)` never reads past `limit`."""

    def __init__(self, path: str, offset: int = 0, *, chunk: int = 1 << 18) -> None:
        self.path, self.offset, self.chunk = path, offset, chunk
        self.bad = 0  # lines that were not JSON records (a torn write by a killed run)
        self._fh = None

    def read(self, limit: Optional[int] = None) -> list:
        """The events of the next whole lines (at most `chunk` bytes of them); [] when none
        are there yet. A last line without a newline at `limit` (the file's final length) is
        read as a whole line: nothing more will come."""
        return self.decode(self.read_lines(limit))

    def read_lines(self, limit: Optional[int] = None) -> bytes:
        """`read`'s whole lines, not decoded (b"" when none are there yet): a reader with no
        room for them counts them (`records_in`) and goes on, which costs a thousandth of
        decoding them."""
        if self._open() is None:
            return b""
        want = self.chunk if limit is None else min(self.chunk, limit - self.offset)
        if want <= 0:
            return b""
        self._fh.seek(self.offset)
        data = self._fh.read(want)
        cut = data.rfind(b"\n") + 1
        if cut == 0 and limit is not None and self.offset + len(data) >= limit:
            cut = len(data)
        if cut == 0:
            return b""
        self.offset += cut
        return data[:cut]

    @staticmethod
    def records_in(data: bytes) -> int:
        """The sinks' records among whole lines of the file: every line but the notices (the
        run's own lines, as `decode` leaves them out); a last line without its newline counted."""
        lines = data.count(b"\n") + (not data.endswith(b"\n") and bool(data.strip()))
        return lines - data.count(_NOTICE)

    def pass_over(self, stop: int) -> tuple[int, int]:
        """Move on to `stop` unread, a line start at or after it (`line_start`): the (start, stop)
        passed over, for `count_records`."""
        start, self.offset = self.offset, self.line_start(stop)
        return start, self.offset

    def line_start(self, pos: int) -> int:
        """The first line start at or after `pos` (just past a newline; the file's end when no
        newline follows), not before this follower's offset."""
        if pos <= self.offset:
            return self.offset
        fh = self._open()
        if fh is None:
            return self.offset
        fh.seek(pos - 1)
        at = pos - 1
        while block := fh.read(1 << 16):
            i = block.find(b"\n")
            if i >= 0:
                return at + i + 1
            at += len(block)
        return at

    def count_records(self, start: int, stop: int) -> int:
        """`records_in` of the whole lines of [start, stop) (`stop` a line start), read in 4 MiB
        blocks into one buffer and never decoded: a flood's skipped middle, counted at the end
        while the sinks drain (a third of a gigabyte in ~0.2 s here, the interpreter lock free
        for the sinks all along when the C count is built)."""
        fh = self._open()
        if fh is None or stop <= start:
            return 0
        if _c_count is not None:  # the same count, with the interpreter lock released (_count.c)
            lines, notices = _c_count(fh.fileno(), start, stop, _NOTICE)
            return lines - notices
        buf = bytearray(min(COUNT_BLOCK, stop - start))
        view = memoryview(buf)
        n, pos = 0, start
        while pos < stop:
            fh.seek(pos)
            got = fh.readinto(view[:min(len(buf), stop - pos)])
            if not got:
                break
            cut = buf.rfind(b"\n", 0, got) + 1 or got  # whole lines, so no notice spans two blocks
            n += buf.count(b"\n", 0, cut) - buf.count(_NOTICE, 0, cut)
            pos += cut
        view.release()
        return n

    def _open(self):
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")
            except FileNotFoundError:
                return None
        return self._fh

    def size(self) -> int:
        try:
            return os.path.getsize(self.path)
        except OSError:
            return self.offset

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def decode(self, data: bytes) -> list:
        """The events of whole lines `read_lines` gave."""
        if not data:
            return []
        lines = [ln for ln in data.split(b"\n") if ln.strip()]
        try:
            records = json.loads(b"[" + b",".join(lines) + b"]")
        except ValueError:  # one bad line: each on its own, the bad ones skipped and counted
            records = []
            for ln in lines:
                try:
                    records.append(json.loads(ln))
                except ValueError:
                    self.bad += 1
                    log.warning("metrics file %s: a line that is not JSON skipped (%d bytes)", self.path, len(ln))
        out = []
        for d in records:
            if not isinstance(d, dict):
                self.bad += 1
            elif "event" not in d:
                try:
                    out.append(_metric(d))
                except (KeyError, TypeError, ValueError):
                    self.bad += 1
            elif d["event"] == "checkpoint":
                out.append(CheckpointEvent(*(d.get(k) for k in _CHECKPOINT[:-1]), d.get("stream", "stdout")))
        return out


def _metric(d: dict) -> Metric:
    """`Metric.from_json_dict(d)`, a third faster: the fields in order, a missing one its default."""
    values = [d.get(k, dflt) for k, dflt in zip(_FIELDS, _DEFAULTS)]
    values[1] = float(d["value"])
    return Metric._make(values)
