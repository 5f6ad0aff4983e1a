"""Bytes in, blocks of complete lines out: the one line splitter for `run` and `replay`.

The supervisor reads 64 KiB chunks; parsing line by line in Python would cost a
function call per line, so the splitter hands parsers a `LineBlock`: many complete
lines as one decoded string. Rules (the same whatever the chunking, so a live run
and a replay of its bytes give the same lines):

- a line ends at ``\\n`` or ``\\r\\n``; a bare ``\\r`` starts a new segment of the same
  line (progress bars): the line's text is its last non-empty segment, i.e. the
  state a terminal shows last;
- a segment longer than `max_line` bytes is cut there, the rest of that line is
  dropped, and the line is flagged truncated: memory stays bounded whatever the
  child writes;
- text is decoded as UTF-8 with replacement; ANSI escape sequences and backspace
  rewrites are removed. The bytes passed through to the terminal are untouched.
"""
from __future__ import annotations

import re
from typing import Iterator, NamedTuple

from .events import LineRecord

__all__ = ["LineBlock", "LineSplitter", "DEFAULT_MAX_LINE", "clean_text"]

DEFAULT_MAX_LINE = 1 << 20

# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and
# two-byte escapes.
_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[@-Z\\-_]"
)


def clean_text(text: str) -> str:
    """Strip ANSI escapes and apply backspaces (Keras 1 progress bars use ``\\b``)."""
    if "\x1b" in text:
        text = _ANSI_RE.sub("", text)
    if "\b" in text:
        text = _apply_backspaces(text)
    return text


def _apply_backspaces(text: str) -> str:
    """Each backspace erases the character before it (never a newline); linear time."""
    parts = text.split("\b")
    buf = list(parts[0])
    for part in parts[1:]:
        if buf and buf[-1] != "\n":
            buf.pop()
        buf.extend(part)
    return "".join(buf)


class LineBlock(NamedTuple):
    """Complete lines of one stream, each ending with ``\\n``, numbered from `first_line`."""

    text: str
    stream: str
    first_line: int
    count: int
    time: float
    wall_time: float
    truncated: tuple = ()

    def records(self) -> Iterator[LineRecord]:
        """One `LineRecord` per line, for line hooks (built only when a hook wants them)."""
        lines = self.text.split("\n")
        lines.pop()
        number = self.first_line
        stream, t, cut = self.stream, self.time, self.truncated
        for text in lines:
            yield LineRecord(text, stream, number, t, number in cut if cut else False)
            number += 1


def _render_line(line: bytes, max_line: int) -> tuple[bytes, bool]:
    """Final state of one line (no ``\\n``) that holds ``\\r`` or is longer than max_line."""
    if b"\r" in line:
        last = b""
        for seg in line.split(b"\r"):
            if len(seg) > max_line:
                return seg[:max_line], True
            if seg:
                last = seg
        return last, False
    if len(line) > max_line:
        return line[:max_line], True
    return line, False


class LineSplitter:
    """Incremental splitter for one stream. Not thread-safe: one per stream, one thread."""

    def __init__(self, stream: str, *, max_line: int = DEFAULT_MAX_LINE) -> None:
        if max_line < 1:
            raise ValueError("max_line must be at least 1")
        self.stream = stream
        self.max_line = max_line
        self.lines = 0  # lines emitted so far
        self._pending = bytearray()  # current (incomplete) line's bytes, compacted
        self._cut = False  # the current line was already cut: drop until newline
        self._skipping = False  # part of the current line was never seen (a gap)

    def feed(self, chunk: bytes, time: float, wall_time: float) -> LineBlock | None:
        """Add bytes; return the lines they complete, or None."""
        if self._skipping:
            first = chunk.find(b"\n")
            if first < 0:
                return None
            self._skipping = False
            self.lines += 1
            chunk = chunk[first + 1 :]
        nl = chunk.rfind(b"\n")
        if nl < 0:
            self._add_partial(chunk)
            return None
        head = chunk[: nl + 1]
        rest = chunk[nl + 1 :]
        block = self._complete(head, time, wall_time)
        self._add_partial(rest)
        return block

    def skip(self, newlines: int, ends_with_newline: bool) -> None:
        """Bytes that will never be fed (the supervisor dropped them from parsing
        because the pipeline fell behind). Lines they touch are counted, not emitted."""
        self._pending = bytearray()
        self._cut = False
        self.lines += newlines
        # Unless the gap ended a line, the line it ends in was partly never seen.
        self._skipping = newlines == 0 or not ends_with_newline

    def finish(self, time: float, wall_time: float) -> LineBlock | None:
        """End of stream: a last line without newline still counts as a line."""
        if self._skipping:
            self._skipping = False
            self.lines += 1
            return None
        if not self._pending and not self._cut:
            return None
        return self._complete(b"\n", time, wall_time)

    # -- internals ---------------------------------------------------------

    def _add_partial(self, data: bytes) -> None:
        if not data or self._cut:
            return
        pending = self._pending
        pending += data
        if len(pending) > self.max_line:
            self._compact()

    def _compact(self) -> None:
        """Keep only what can still become the line's final state."""
        pending = self._pending
        if b"\r" in pending:
            # Keep the last non-empty complete segment and the open one.
            segs = bytes(pending).split(b"\r")
            open_seg = segs.pop()
            for seg in segs:
                if len(seg) > self.max_line:
                    self._cut_at(seg)
                    return
            last = next((s for s in reversed(segs) if s), b"")
            if len(open_seg) > self.max_line:
                self._cut_at(open_seg)
                return
            self._pending = bytearray(last + b"\r" + open_seg)
        elif len(pending) > self.max_line:
            self._cut_at(pending)

    def _cut_at(self, seg: bytes | bytearray) -> None:
        self._pending = bytearray(seg[: self.max_line])
        self._cut = True

    def _complete(self, head: bytes, time: float, wall_time: float) -> LineBlock:
        """`head` ends with ``\\n``; the first line of it continues `_pending`."""
        truncated: list[int] = []
        first_no = self.lines + 1
        if self._pending or self._cut:
            first_nl = head.find(b"\n")
            if self._cut:
                first, cut = bytes(self._pending), True
            else:
                line = bytes(self._pending) + head[:first_nl]
                if line.endswith(b"\r"):
                    line = line[:-1]
                first, cut = _render_line(line, self.max_line)
            if cut:
                truncated.append(first_no)
            head = first + b"\n" + head[first_nl + 1 :]
            self._pending = bytearray()
            self._cut = False
        if b"\r" in head:
            head = head.replace(b"\r\n", b"\n")
        count = head.count(b"\n")
        if b"\r" in head or len(head) > self.max_line:
            head, more_cut = self._render_all(head, first_no)
            truncated.extend(more_cut)
        self.lines += count
        text = head.decode("utf-8", "replace")
        if "\x1b" in text or "\b" in text:
            text = clean_text(text)
        return LineBlock(text, self.stream, first_no, count, time, wall_time, tuple(truncated))

    def _render_all(self, head: bytes, first_no: int) -> tuple[bytes, list[int]]:
        max_line = self.max_line
        lines = head.split(b"\n")
        cut_numbers = []
        for i, line in enumerate(lines):
            if len(line) > max_line or b"\r" in line:
                lines[i], cut = _render_line(line, max_line)
                if cut:
                    cut_numbers.append(first_no + i)
        return b"\n".join(lines), cut_numbers
