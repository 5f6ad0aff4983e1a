"""Bytes in, blocks of complete lines out: the one line splitter for `run` and `replay`.

The supervisor reads 64 KiB chunks; parsing line by line in Python would cost a
function call per line, so the splitter hands parsers a `LineBlock`: many complete
lines as one decoded string. Rules (the same whatever the chunking, so a live run
and a replay of its bytes give the same lines and the parsers the same states):

- a line ends at ``\\n`` or ``\\r\\n``; line numbers count physical lines;
- a line the child rewrote (bare ``\\r``, ``\\b``: progress bars) is rendered the way a
  terminal shows it (`trainvisor.stream.terminal`): its text in the block is every state a
  reader could have seen, in order, separated by ``\\r`` (a line never rewritten is
  unchanged); parsers read each state (`LineParser.feed_lines`), line hooks the last;
- a line still open whose states exceed `OPEN_STATE_BUDGET` characters (tqdm over a
  whole epoch writes no ``\\n``) hands its older states out early: the block then ends
  with that line's states (`LineBlock.open_line`), not counted until the line ends;
- in a line that starts with a launcher's rank label (`rankprefix`), each label gets a row of
  its own (`Rows`): a launcher that labels every segment a ``\\r`` began interleaves several
  ranks' rewrites in one physical line, and each rank's states are drawn, without the label, as
  its own terminal drew them; each state is given behind its row's label (each row's states in
  order; the rows in the order they first came);
- a segment longer than `max_line` bytes is cut there, the rest of that line is
  dropped, and the line is flagged truncated: memory stays bounded whatever the
  child writes;
- text is decoded as UTF-8 with replacement; ANSI escape sequences are removed.
  The bytes passed through to the terminal are untouched.
"""
from __future__ import annotations

from typing import Optional

from .. import defaults
from ..events import LineBlock
from .rankprefix import label_at_start, segment_label
from .terminal import OpenLine, clean_text

__all__ = ["LineBlock", "LineSplitter", "DEFAULT_MAX_LINE", "OPEN_STATE_BUDGET", "clean_text"]

DEFAULT_MAX_LINE = defaults.MAX_LINE_BYTES
OPEN_STATE_BUDGET = 1 << 16  # characters of an open line's states held before older ones are handed out


class LineSplitter:
    """Incremental splitter for one stream. Not thread-safe: one per stream, one thread."""

    def __init__(self, stream: str, *, max_line: int = DEFAULT_MAX_LINE, state_budget: int = OPEN_STATE_BUDGET) -> None:
        if max_line < 1:
            raise ValueError("max_line must be at least 1")
        self.stream = stream
        self.max_line = max_line
        self.lines = 0  # lines emitted so far
        self._pending = bytearray()  # the open line's bytes after its last \r (not rendered yet)
        self._open = Rows(state_budget)  # the open line's rows and states
        self._cut = False  # the current line was already cut: drop until newline
        self._skipping = False  # part of the current line was never seen (a gap)
        self._touched = False  # the open line has bytes

    def feed(self, chunk: bytes, time: float, wall_time: float) -> LineBlock | None:
        """Add bytes; return the lines they complete (and early states of the open line), or None."""
        if self._skipping:
            first = chunk.find(b"\n")
            if first < 0:
                return None
            self._skipping = False
            self.lines += 1
            chunk = chunk[first + 1 :]
        nl = chunk.rfind(b"\n")
        if nl < 0:
            self._add_open(chunk)
            early = self._open.take_handed()
            if not early:
                return None
            return LineBlock(early + "\n", self.stream, self.lines + 1, 0, time, wall_time, (), True)
        first_no = self.lines + 1
        text, count, truncated = self._complete(chunk[: nl + 1])
        self._add_open(chunk[nl + 1 :])
        early = self._open.take_handed()
        if early:
            text += early + "\n"
        return LineBlock(text, self.stream, first_no, count, time, wall_time, truncated, bool(early))

    def skip(self, newlines: int, ends_with_newline: bool) -> None:
        """Bytes that will never be fed (the supervisor dropped them from parsing
        because the pipeline fell behind). Lines they touch are counted, not emitted, except a
        line cut at `max_line` already: a gap inside its tail loses nothing that would be read."""
        if self._cut and newlines == 0:
            return
        self._pending = bytearray()
        self._open.reset()
        self._cut = self._touched = False
        self.lines += newlines
        # Unless the gap ended a line, the line it ends in was partly never seen.
        self._skipping = newlines == 0 or not ends_with_newline

    def finish(self, time: float, wall_time: float) -> LineBlock | None:
        """End of stream: a last line without newline still counts as a line."""
        if self._skipping:
            self._skipping = False
            self.lines += 1
            return None
        if not self._touched:
            return None
        first_no = self.lines + 1
        text, count, truncated = self._complete(b"\n")
        return LineBlock(text, self.stream, first_no, count, time, wall_time, truncated)

    # -- internals ---------------------------------------------------------

    def _add_open(self, data: bytes) -> None:
        """Bytes of the open line: its complete segments are rendered now, the open one waits."""
        if not data or self._cut:
            return
        self._touched = True
        pending = self._pending
        waiting = pending.endswith(b"\r")  # a segment that waited for the byte after its \r
        pending += data
        if waiting or b"\r" in data:
            # a \r that ends what came so far may be a \r\n's: its segment waits for the next byte
            cr = pending.rfind(b"\r", 0, len(pending) - 1)
            segments = self._segments_fitting(pending[:cr]) if cr >= 0 else None
            if segments is not None:
                self._open.write(segments.decode("utf-8", "replace"))
                del pending[: cr + 1]
        if not self._cut and len(pending) - pending.endswith(b"\r") > self.max_line:
            self._cut_open(pending)

    def _segments_fitting(self, data: bytearray | bytes) -> bytes | None:
        """`data` (segments, each followed by \\r), or None after cutting at the first too long one."""
        if len(data) <= self.max_line:
            return bytes(data)
        start = 0
        max_line = self.max_line
        while True:
            cr = data.find(b"\r", start)
            end = len(data) if cr < 0 else cr
            if end - start > max_line:
                if start:
                    self._open.write(bytes(data[: start - 1]).decode("utf-8", "replace"))
                self._cut_open(data[start:end])
                return None
            if cr < 0:
                return bytes(data)
            start = cr + 1

    def _cut_open(self, segment: bytes | bytearray) -> None:
        """The open segment is longer than max_line: it shows cut, the rest of the line is dropped."""
        self._open.write_uncaptured(bytes(segment[: self.max_line]).decode("utf-8", "replace"))
        self._pending = bytearray()
        self._cut = True

    def _close_open(self, rest: bytes) -> tuple[str, bool]:
        """The open line ends with `rest` (its bytes up to the newline): its text and whether it was cut."""
        if not self._cut:
            self._add_open(rest)
        if not self._cut:
            tail = self._pending.decode("utf-8", "replace")
            self._open.write(tail, ends=True)
        else:
            self._open.capture()
        cut = self._cut
        self._pending = bytearray()
        self._cut = self._touched = False
        return self._open.take(), cut

    def _complete(self, head: bytes) -> tuple[str, int, tuple]:
        """`head` ends with ``\\n``; its first line continues the open line. Text, count, truncated."""
        first_no = self.lines + 1
        truncated: list[int] = []
        count = head.count(b"\n")
        if self._touched:
            first_nl = head.find(b"\n")
            rest = head[:first_nl]
            # a \r\n ends the open line as it ends a whole one (_render_complete): without its \r
            if rest.endswith(b"\r"):
                rest = rest[:-1]
            elif not rest and self._pending.endswith(b"\r"):
                del self._pending[-1:]  # the \r came with the bytes before
            first, cut = self._close_open(rest)
            if cut:
                truncated.append(first_no)
            text = first + "\n" + self._render_complete(head[first_nl + 1 :], first_no + 1, truncated)
        else:
            text = self._render_complete(head, first_no, truncated)
        self.lines += count
        return text, count, tuple(truncated)

    def _render_complete(self, head: bytes, first_no: int, truncated: list[int]) -> str:
        """Whole lines (each ending with \\n) as text: rewritten or too long ones rendered one by one."""
        if b"\r" in head:
            head = head.replace(b"\r\n", b"\n")
        if b"\r" not in head and not _has_long_line(head, self.max_line):
            text = head.decode("utf-8", "replace")
            return clean_text(text) if "\x1b" in text or "\b" in text else text
        lines = head.split(b"\n")
        lines.pop()
        out = []
        for i, line in enumerate(lines):
            if b"\r" in line or len(line) > self.max_line:
                rendered, cut = self._close_open(line)
                if cut:
                    truncated.append(first_no + i)
                out.append(rendered)
            else:
                text = line.decode("utf-8", "replace")
                out.append(clean_text(text) if "\x1b" in text or "\b" in text else text)
        return "".join(t + "\n" for t in out)


MAX_ROWS = 64  # labelled rows of one line: past them, a new label's segments go to the plain row


class Rows:
    """The rows of the line being written: the plain one, and one per launcher label.

    Drawn on one row, the states of ranks that interleave their segments in a physical line would
    keep the tail of one another's text, numbers included, and a reader would take one rank's
    values for another's. So in a line that starts with a label (a launcher labels every line it
    writes), a segment that starts with a label is drawn, without it, on that label's row (an
    `OpenLine`), and a segment without one on the row of the segment before it. Same methods as
    `OpenLine`, which it drives as is; any other line (every ordinary log's) is the plain row
    alone, for the price of one anchored pattern match a line. Each row holds at most `budget`
    characters of states before it hands the older ones out; at most `MAX_ROWS` + 1 rows.
    """

    __slots__ = ("plain", "labelled", "current")

    def __init__(self, budget: int) -> None:
        self.plain = OpenLine(budget)
        self.labelled: dict[tuple, tuple[str, OpenLine]] = {}  # key -> (label, row), first come first
        self.current: Optional[OpenLine] = None  # the row of the last segment written; None: none yet

    @property
    def size(self) -> int:
        """Characters of states held, all rows together."""
        return self.plain.size + sum(row.size for _, row in self.labelled.values())

    def reset(self) -> None:
        self.plain.reset()
        self.labelled = {}
        self.current = None

    def write(self, text: str, *, ends: bool = False) -> None:
        """As `OpenLine.write`, each segment of a labelled line on its own label's row. `ends`:
        the line ends with `text`. A line is labelled or plain from its first write on, so
        whatever the chunking: labelled when it starts with a label and has a \\r (a line of one
        segment has nothing to keep apart: it reads as written, a backspace over its label too)."""
        single = ends and "\r" not in text
        if not self.labelled and (self.current is not None or single or label_at_start(text) is None):
            self.current = self.plain
            self.plain.write(text)
            return
        row, group = self.current or self.plain, []
        for segment in text.split("\r"):
            to, segment = self._row_of(segment, row)
            if to is not row:
                if group:
                    row.write("\r".join(group))
                row, group = to, []
            group.append(segment)
        row.write("\r".join(group))
        self.current = row

    def write_uncaptured(self, text: str) -> None:
        """As `OpenLine.write_uncaptured`: a cut segment, the last the line draws."""
        if not self.labelled:
            self.current = self.plain
            self.plain.write_uncaptured(text)
            return
        row, text = self._row_of(text, self.current)
        row.write_uncaptured(text)
        self.current = row

    def capture(self) -> None:
        (self.current or self.plain).capture()

    def take_handed(self) -> str:
        if not self.labelled:
            return self.plain.take_handed()
        handed = [(label, row.take_handed()) for label, row in self.labelled.values()]
        return self._join(self.plain.take_handed(), handed)

    def take(self) -> str:
        if not self.labelled:
            self.current = None
            return self.plain.take()
        text = self._join(self.plain.take(), [(label, row.take()) for label, row in self.labelled.values()])
        self.labelled = {}
        self.current = None
        return text

    def _row_of(self, segment: str, row: OpenLine) -> tuple[OpenLine, str]:
        """The row `segment` is drawn on (`row`, the one before, unless it starts with a label),
        and what is drawn there (the segment without its label)."""
        hit = segment_label(segment) if segment else None
        if hit is None:
            return row, segment
        key, label = hit
        entry = self.labelled.get(key)
        if entry is None:
            if len(self.labelled) >= MAX_ROWS:
                return self.plain, segment  # drawn with its label, which still says whose it is
            entry = self.labelled[key] = (label, OpenLine(self.plain.budget))
        return entry[1], segment[len(label):]

    @staticmethod
    def _join(plain: str, labelled: list[tuple[str, str]]) -> str:
        """The plain row's states, then each label's, every state behind its label."""
        parts = [plain] if plain else []
        parts.extend(label + states.replace("\r", "\r" + label) for label, states in labelled if states)
        return "\r".join(parts)


def _has_long_line(head: bytes, max_line: int) -> bool:
    if len(head) <= max_line:
        return False
    start = 0
    while start < len(head):
        nl = head.find(b"\n", start)
        if nl - start > max_line:
            return True
        start = nl + 1
    return False
