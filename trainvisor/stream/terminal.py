"""One physical line as a terminal shows it while the child rewrites it.

Progress bars redraw their line with ``\\r`` (cursor back to column 0) and ``\\b``
(cursor back one column). A terminal overwrites: later characters replace earlier
ones, and a shorter rewrite leaves the tail of the longer text it covers. Every
state a reader could have seen -- the row at each ``\\r`` and at the line end --
is a *state*; consecutive equal states count once. `OpenLine` keeps what the row
shows and the states not yet handed to the parsers, bounded in size: once they
exceed `budget` characters, all but the newest are handed out early (the rule
depends only on the states, never on how the bytes were chunked). A state keeps
at most `STALE_TAIL` columns of an older row beyond what its own rewrite reached.

Columns are characters of the decoded text; ANSI escape sequences take none. The
sequences programs redraw with are carried out as a terminal does (`render`): erase in
line (``ESC[K``, ``ESC[0K``: to the end; ``ESC[1K``: from the start through the cursor;
``ESC[2K``: the whole row; the cursor stays), cursor up and down (``ESC[nA``, ``ESC[nB``;
``ESC[nF``, ``ESC[nE`` also go to column 0) and to a column (``ESC[nG``, ``ESC[nC``,
``ESC[nD``). Rich redraws a row with ``\r ESC[2K`` and a multi-row display by going up
``ESC[1A ESC[2K`` row by row; tqdm's nested bars go up with ``ESC[A`` and pad their rewrite.
A line's rows are its own: the cursor moves up at most `MAX_ROWS` rows above the line's
row, whose content the model does not know (they start blank: Rich erases them before it
writes, tqdm writes them whole), and the line ends (``\n``) on a fresh row. A state is the
row under the cursor, captured at each ``\r``, at the line end, and when a cursor move
leaves a row it changed. Other escapes (colours, modes, titles) are removed.
"""
from __future__ import annotations

import re

__all__ = ["OpenLine", "clean_text", "overwrite", "render"]

# CSI sequences (colours, cursor moves), OSC sequences (titles, links; never across a
# line or a \r, so removing them segment by segment or line by line is the same) and
# two-byte escapes.
_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b\r\n]*(?:\x07|\x1b\\)?"
    r"|\x1b[@-Z\\-_]"
)
# The CSI sequences carried out: cursor up/down/forward/back, next/previous line, to a column,
# erase in line. `split` gives text, parameter, final letter, text, ...
_CONTROL_RE = re.compile(r"\x1b\[(\d*)([A-GK])")
# The escapes that are only removed: `_ANSI_RE` but the sequences carried out.
_OTHER_ANSI_RE = re.compile(
    r"\x1b\[(?!\d*[A-GK])[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b\r\n]*(?:\x07|\x1b\\)?"
    r"|\x1b[@-Z\\-_]"
)


def clean_text(text: str) -> str:
    """Strip ANSI escapes and apply backspaces the way a terminal does, line by line
    (Keras 1 progress bars use ``\\b``); ``\\r`` rewrites are `OpenLine`'s job. A line that
    erases or moves the cursor is rendered as `OpenLine` renders it (its states, ``\\r``
    between them), so a line gives the same states whichever way the splitter reads it."""
    if "\x1b" in text:
        text = _OTHER_ANSI_RE.sub("", text)
        if "\x1b" in text:  # a sequence carried out (or a stray ESC)
            return "\n".join(render(line) if "\x1b" in line or "\b" in line else line for line in text.split("\n"))
    if "\b" in text:
        text = "\n".join(overwrite("", line) if "\b" in line else line for line in text.split("\n"))
    return text


def render(line: str) -> str:
    """The states of one whole line (segments separated by ``\\r``), ``\\r`` between them."""
    row = OpenLine(1 << 62)
    row.write(line)
    return row.take()


def overwrite(screen: str, segment: str) -> str:
    """What the row shows after `segment` is written from column 0 over `screen`."""
    if "\b" not in segment:
        n = len(segment)
        return segment + screen[n:] if n < len(screen) else segment
    cells = list(screen)
    col = 0
    for i, piece in enumerate(segment.split("\b")):
        if i and col:
            col -= 1  # the cursor moves back; nothing is erased
        cells[col:col + len(piece)] = piece
        col += len(piece)
    return "".join(cells)


def _put(screen: str, col: int, text: str) -> tuple[str, int]:
    """`text` (backspaces move the cursor back) written at `col`: the row and the cursor after.
    A write past the row's end leaves blank cells (spaces) before it, as the cursor jumped."""
    for i, piece in enumerate(text.split("\b") if "\b" in text else (text,)):
        if i and col:
            col -= 1
        if piece:
            if col > len(screen):
                screen += " " * (col - len(screen))
            end = col + len(piece)
            screen = screen[:col] + piece + screen[end:]
            col = end
    return screen, col


def _erase(screen: str, col: int, mode: str) -> str:
    """Erase in line (``ESC[K``): 0 to the end, 1 from the start through the cursor, 2 all.
    Erased cells at the row's end are no text; erased cells before text are blanks."""
    if mode in ("", "0"):
        return screen[:col]
    if mode == "1":
        rest = screen[col + 1:]
        return " " * (col + 1) + rest if rest else ""
    return "" if mode == "2" else screen


# Columns of an older, longer row that a state keeps after what its rewrite wrote: they were
# offered with the state that wrote them; past this they are left out, so that many short
# rewrites of a very long row cost memory in proportion to what the child wrote.
STALE_TAIL = 256
# Rows above a line's own row that a cursor move can reach; a move further up stays on the top one.
MAX_ROWS = 32


class OpenLine:
    """The rendered rows of one physical line (the cursor's, and those a cursor move left),
    and its states not yet handed out."""

    __slots__ = ("budget", "screen", "last", "states", "size", "handed", "row", "rows")

    def __init__(self, budget: int) -> None:
        self.budget = budget  # characters of states held before the older ones are handed out
        self.reset()

    def reset(self) -> None:
        self.screen = ""  # the row under the cursor
        self.last = ""  # the newest state captured (consecutive duplicates count once)
        self.states: list[str] = []
        self.size = 0
        self.handed: list[str] = []  # handed out early, waiting for the block that carries them
        self.row = 0  # the cursor's row: 0 is the line's own, -n is n rows above it
        self.rows: dict[int, str] = {}  # the other rows' text, while a cursor move has left them

    def write(self, text: str) -> None:
        """`text`: decoded segments separated by ``\\r``, each followed by a ``\\r`` or the line end:
        each is written from column 0 and the row is captured after it."""
        if "\x1b" in text:
            text = _OTHER_ANSI_RE.sub("", text)
            if "\x1b" in text:  # a sequence carried out (or a stray ESC)
                self._write_mixed(text.split("\r"))
                return
        self._write_plain(text.split("\r"), "\b" not in text)

    def _write_mixed(self, segments: list[str]) -> None:
        """Segments some of which erase or move the cursor: those through `_render`, runs of the
        others through the fast loop (both give the same row and states for a plain segment)."""
        start = 0
        for i, seg in enumerate(segments):
            if "\x1b" in seg:
                if start < i:
                    self._write_plain(segments[start:i], False)
                self._render(seg, True)
                start = i + 1
        if start < len(segments):
            self._write_plain(segments[start:], False)

    def _write_plain(self, segments: list[str], plain: bool) -> None:
        """Segments without escapes (`plain`: nor backspaces), each written from column 0."""
        screen, last, states, size, budget = self.screen, self.last, self.states, self.size, self.budget
        width = len(screen)
        append = states.append
        for seg in segments:
            n = len(seg)  # the columns this rewrite reaches (at most, with \b)
            row = (seg + screen[n:] if n < width else seg) if plain else overwrite(screen, seg)
            if row == screen:
                continue  # nothing a reader sees changed: no new state
            screen = row
            width = len(row)
            state = screen if width - n <= STALE_TAIL else screen[: n + STALE_TAIL]
            if state != last and state:
                append(state)
                last = state
                size += len(state)
                if size > budget:
                    size = self._hand_out(states)
        self.screen, self.last, self.size = screen, last, size

    def write_uncaptured(self, text: str) -> None:
        """A cut segment: it is shown, and captured only when the line ends (`capture`)."""
        if "\x1b" in text:
            text = _OTHER_ANSI_RE.sub("", text)
        if "\x1b" in text:
            self._render(text, False)
        else:
            self.screen = overwrite(self.screen, text)

    def capture(self) -> None:
        screen = self.screen
        if screen != self.last and screen:
            self.states.append(screen)
            self.last = screen

    def take_handed(self) -> str:
        """The states handed out early, as one ``\\r``-separated text ("" when none)."""
        handed = self.handed
        if not handed:
            return ""
        self.handed = []
        return "\r".join(handed)

    def take(self) -> str:
        """The line ended: all its states not delivered yet; the next line starts on a fresh row."""
        text = "\r".join(self.handed + self.states) if self.handed else "\r".join(self.states)
        self.reset()
        return text

    def _render(self, seg: str, capture: bool) -> None:
        """One segment that erases or moves the cursor, written from column 0 of the cursor's row
        (the slow path; a segment without such sequences gives what `write`'s loop gives)."""
        parts = _CONTROL_RE.split(seg)  # text, parameter, letter, text, ...
        screen = arrived = self.screen  # `arrived`: the row as the cursor found it
        col = reach = 0  # the cursor; the columns this visit's writes reached
        for i in range(0, len(parts), 3):
            text = parts[i]
            if text:
                if "\x1b" in text:
                    text = _ANSI_RE.sub("", text)
                reach = max(reach, col + len(text))
                screen, col = _put(screen, col, text)
            if i + 1 == len(parts):
                break
            param, letter = parts[i + 1], parts[i + 2]
            if letter == "K":
                screen = _erase(screen, col, param)
                continue
            n = int(param) if param and param != "0" else 1
            if letter in "ABEF":
                target = max(-MAX_ROWS, min(0, self.row + (n if letter in "BE" else -n)))
                if target != self.row:
                    if capture and screen != arrived:
                        self._capture(screen, reach)
                    self._leave(screen, target)
                    screen = arrived = self.screen
                    reach = 0
                col = 0 if letter in "EF" else col
            else:  # C forward, D back, G to a column (1-based)
                col = col + n if letter == "C" else max(0, col - n) if letter == "D" else n - 1
        self.screen = screen
        if capture and screen != arrived:
            self._capture(screen, reach)

    def _leave(self, screen: str, target: int) -> None:
        """The cursor moves from its row (now showing `screen`) to row `target`."""
        rows = self.rows
        if screen:
            rows[self.row] = screen
        else:
            rows.pop(self.row, None)
        self.row = target
        self.screen = rows.pop(target, "")

    def _capture(self, screen: str, reach: int) -> None:
        state = screen if len(screen) - reach <= STALE_TAIL else screen[: reach + STALE_TAIL]
        if state != self.last and state:
            self.states.append(state)
            self.last = state
            self.size += len(state)
            if self.size > self.budget:
                self.size = self._hand_out(self.states)

    def _hand_out(self, states: list[str]) -> int:
        """All states but the newest go out; the newest may still be the line's final state."""
        newest = states.pop()
        self.handed.extend(states)
        states.clear()
        states.append(newest)
        return len(newest)
