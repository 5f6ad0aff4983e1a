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

Columns are characters of the decoded text; ANSI escape sequences take none
(they are removed before rendering, segment by segment).
"""
from __future__ import annotations

import re

__all__ = ["OpenLine", "clean_text", "overwrite"]

# CSI sequences (colours, cursor moves), OSC sequences (titles, links; never across a
# line or a \r, so removing them segment by segment or line by line is the same) and
# two-byte escapes.
_ANSI_RE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b\r\n]*(?:\x07|\x1b\\)?"
    r"|\x1b[@-Z\\-_]"
)


def clean_text(text: str) -> str:
    """Strip ANSI escapes and apply backspaces the way a terminal does, line by line
    (Keras 1 progress bars use ``\\b``); ``\\r`` rewrites are `OpenLine`'s job."""
    if "\x1b" in text:
        text = _ANSI_RE.sub("", text)
    if "\b" in text:
        text = "\n".join(overwrite("", line) if "\b" in line else line for line in text.split("\n"))
    return text


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


# Columns of an older, longer row that a state keeps after what its rewrite wrote: they were
# offered with the state that wrote them; past this they are left out, so that many short
# rewrites of a very long row cost memory in proportion to what the child wrote.
STALE_TAIL = 256


class OpenLine:
    """The rendered row of one physical line, and its states not yet handed out."""

    __slots__ = ("budget", "screen", "last", "states", "size", "handed")

    def __init__(self, budget: int) -> None:
        self.budget = budget  # characters of states held before the older ones are handed out
        self.reset()

    def reset(self) -> None:
        self.screen = ""
        self.last = ""  # the newest state captured (consecutive duplicates count once)
        self.states: list[str] = []
        self.size = 0
        self.handed: list[str] = []  # handed out early, waiting for the block that carries them

    def write(self, text: str) -> None:
        """`text`: decoded segments separated by ``\\r``, each followed by a ``\\r`` or the line end:
        each is written from column 0 and the row is captured after it."""
        if "\x1b" in text:
            text = _ANSI_RE.sub("", text)
        screen, last, states, size, budget = self.screen, self.last, self.states, self.size, self.budget
        plain = "\b" not in text
        width = len(screen)
        append = states.append
        for seg in text.split("\r"):
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
        self.screen = overwrite(self.screen, _ANSI_RE.sub("", text) if "\x1b" in text else text)

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
        """The line ended: all its states not delivered yet; the row starts empty again."""
        text = "\r".join(self.handed + self.states) if self.handed else "\r".join(self.states)
        self.reset()
        return text

    def _hand_out(self, states: list[str]) -> int:
        """All states but the newest go out; the newest may still be the line's final state."""
        newest = states.pop()
        self.handed.extend(states)
        states.clear()
        states.append(newest)
        return len(newest)
