"""``auto``: choose the parser from the command line, else from the first lines of output.

Deterministic for replay: the choice depends on line counts, never on time.
The choice itself is `chooser.choose`, a pure function of the command, the
lines held so far and the registry's public `ParserInfo`s; this class only
holds lines, asks, and hands lines to the chosen parser:

- *hold*: lines are held until a signature line appears; the format that leads
  then is chosen and the held lines are fed to it, so nothing is lost and a
  live run's metrics are not delayed past the first signature line.
- *confirm*: until `WINDOW` lines have gone by the choice stays open: if another
  format clearly outnumbers it, `auto` switches once.
- *watch*: with no signature in the window, ``generic`` parses meanwhile and
  `auto` switches once, to the first format that shows up later.
- *final*: `feed` is the chosen parser's own bound `feed`, so `auto` costs
  nothing per block from then on.
"""
from __future__ import annotations

import logging
from typing import Callable, ClassVar, Optional

from ..events import Event, LineBlock
from . import create_parser, parser_infos, register_parser
from .base import Parser, ParserOptions
from .chooser import (BY_SIGNATURE, DECIDE_HITS, FALLBACK, WINDOW, Choice, candidates, choose, choose_by_argv,
                      count_signatures, first_signature)

__all__ = ["AutoParser", "choose_by_argv", "WINDOW"]

log = logging.getLogger("trainvisor.parsers.auto")

HOLD, CONFIRM, WATCH, FINAL = "hold", "confirm", "watch", "final"


def _lines_of(block: LineBlock):
    """The block's lines as one-line blocks (an open line's early states as a block of count 0)."""
    texts = block.text.split("\n")
    texts.pop()
    cut = block.truncated
    for i, text in enumerate(texts):
        n = block.first_line + i
        complete = i < block.count
        yield LineBlock(text + "\n", block.stream, n, int(complete), block.time, block.wall_time,
                        (n,) if n in cut else (), not complete)


def _slice(block: LineBlock, start: int, end: Optional[int] = None) -> LineBlock:
    """Lines [start, end) of a block, as a block."""
    lines = block.text.split("\n")[:-1][start:end]
    first = block.first_line + start
    last = first + len(lines)
    cut = tuple(n for n in block.truncated if first <= n < last)
    with_open = block.open_line and last > block.first_line + block.count
    return LineBlock("".join(t + "\n" for t in lines), block.stream, first, len(lines) - with_open, block.time,
                     block.wall_time, cut, with_open)


class _Feed:
    """`AutoParser.feed`: once the choice is final, the chosen parser's own bound
    `feed` (a caller that looks it up per block pays nothing for `auto`); before,
    auto's line-by-line `_feed_open`. Defined once on the class: nothing is
    replaced at run time."""

    def __get__(self, obj: Optional["AutoParser"], owner: type) -> Callable[[LineBlock], list[Event]]:
        if obj is None:
            return owner._feed_open  # type: ignore[attr-defined]
        if obj._phase == FINAL:
            return obj._delegate.feed  # type: ignore[union-attr]
        return obj._feed_open


@register_parser
class AutoParser:
    name: ClassVar[str] = "auto"
    description: ClassVar[str] = "choose the parser from the command line or the first lines of output (default)"
    feed = _Feed()

    def __init__(self, options: ParserOptions | None = None) -> None:
        self.options = options or ParserOptions()
        self.chosen: Optional[str] = None
        self.reason = ""
        self.switched = False
        self._phase = HOLD
        self._infos_cache: Optional[tuple] = None  # every parser's info: loaded when the first line needs it
        self._cands_cache: Optional[tuple] = None
        self._held: list[LineBlock] = []
        self._held_lines = 0  # complete lines among _held
        self._delegate: Optional[Parser] = None
        self._since: dict[str, int] = {}  # signature counts since an early choice
        self._retained: list[LineBlock] = []  # lines since the choice, while it may change
        self._first_seen: dict[str, int] = {}  # format -> index in _retained of its first signature
        self._emitted: set[int] = set()  # retained lines the chosen parser made events from
        self._lines_seen = 0  # lines read while the choice is open
        by_argv = choose_by_argv(self.options.argv)
        if by_argv is not None:
            self._settle(by_argv, FINAL)

    @property
    def _infos(self) -> tuple:
        if self._infos_cache is None:
            self._infos_cache = parser_infos()
        return self._infos_cache

    @property
    def _cands(self) -> tuple:
        if self._cands_cache is None:
            self._cands_cache = candidates(self._infos)
        return self._cands_cache

    def _feed_open(self, block: LineBlock) -> list[Event]:
        if self._phase == FINAL:  # only reached by a caller that kept a reference to this method
            return self._delegate.feed(block)  # type: ignore[union-attr]
        if self._phase == WATCH:
            return self._watch(block)
        # Undecided: go line by line, so that the choice (and which parser gets
        # which line) never depends on where the blocks happen to end -- a live
        # run's blocks are small, a replay's large, and both must agree.
        out: list[Event] = []
        for i, line in enumerate(_lines_of(block)):
            if self._phase == FINAL:
                out.extend(self._delegate.feed(_slice(block, i)))  # type: ignore[union-attr]
                break
            if self._phase == WATCH:
                out.extend(self._watch(_slice(block, i)))
                break
            out.extend(self._confirm(line) if self._phase == CONFIRM else self._hold(line))
        return out

    def finish(self) -> list[Event]:
        if self._phase == HOLD and not self._held:
            return []  # the child printed nothing: no format to choose, no parser to load
        if self._phase == HOLD:
            choice = choose(self.options.argv, [b.text for b in self._held], self._infos, final=True)
            return self._release(choice) + self._delegate.finish()  # type: ignore[union-attr, operator]
        return self._delegate.finish()  # type: ignore[union-attr]

    # -- the phases ---------------------------------------------------------

    def _hold(self, line: LineBlock) -> list[Event]:
        self._held.append(line)
        self._held_lines += line.count
        # Signature counts only change on a signature line: ask the chooser then, or when the window is full.
        # An open line's early states (a bar with no newline yet) decide now: holding them is unbounded.
        if first_signature(line.text, self._cands) is None and self._held_lines < WINDOW and line.count:
            return []
        choice = choose(self.options.argv, [b.text for b in self._held], self._infos, final=not line.count)
        return [] if choice is None else self._release(choice)

    def _release(self, choice: Choice) -> list[Event]:
        """Settle on `choice` and feed it the held lines."""
        if choice.basis == BY_SIGNATURE:
            self._settle(choice, CONFIRM if self._held_lines < WINDOW else FINAL)
        else:
            self._settle(choice, WATCH)
        held, self._held, self._held_lines = self._held, [], 0
        out: list[Event] = []
        for block in held:
            out.extend(self._delegate.feed(block))  # type: ignore[union-attr]
        return out

    def _confirm(self, line: LineBlock) -> list[Event]:
        """One line while the early choice may still change. The lines since the
        choice are kept (at most WINDOW) so that a switch can hand the new parser
        its format's lines from the first one it would have recognised."""
        self._lines_seen += line.count
        retained = self._retained
        retained.append(line)
        for name, n in count_signatures([line.text], self._cands).items():
            if not self._since.get(name):
                self._first_seen.setdefault(name, len(retained) - 1)
            self._since[name] = self._since.get(name, 0) + n
        out = self._switch_if_outnumbered()
        if out is not None:
            return out
        out = self._delegate.feed(line)  # type: ignore[union-attr]
        if out:
            self._emitted.add(line.first_line)
        if self._lines_seen >= WINDOW:
            self._phase = FINAL
            self._retained, self._emitted = [], set()
        return out

    def _switch_if_outnumbered(self) -> Optional[list[Event]]:
        mine = self._since.get(self.chosen, 0)  # type: ignore[arg-type]
        for name, n in self._since.items():
            if name != self.chosen and n >= DECIDE_HITS and n > 2 * mine:
                self.switched = True
                start = self._first_seen.get(name, len(self._retained) - 1)
                self._settle(Choice(name, f"switched from {self.chosen} at line {self._retained[start].first_line}: "
                                          f"{n} {name} signature lines against {mine}", BY_SIGNATURE), FINAL)
                out: list[Event] = []
                for held in self._retained[start:]:
                    # a line the old parser already read stays its, no double events
                    if held.first_line not in self._emitted:
                        out.extend(self._delegate.feed(held))  # type: ignore[union-attr]
                self._retained, self._emitted = [], set()
                return out
        return None

    def _watch(self, block: LineBlock) -> list[Event]:
        hit = first_signature(block.text, self._cands)
        if hit is None:
            return self._delegate.feed(block)  # type: ignore[union-attr]
        # The first line with a signature decides; the lines before it stay with the fallback.
        k = hit.line_index
        out = self._delegate.feed(_slice(block, 0, k)) if k else []  # type: ignore[union-attr]
        self.switched = True
        self._settle(Choice(hit.name, f"switched from {FALLBACK} at line {block.first_line + k}: "
                                      f"{hit.excerpt[:60]!r}", BY_SIGNATURE), FINAL)
        out.extend(self._delegate.feed(_slice(block, k)))  # type: ignore[union-attr]
        return out

    def _settle(self, choice: Choice, phase: str) -> None:
        self.chosen, self.reason = choice.name, choice.reason
        self._phase = phase
        self._lines_seen = self._held_lines
        self._delegate = create_parser(choice.name, self.options)
        log.info("parser auto: chose %s (%s)", choice.name, choice.reason)
