"""The parser protocol: blocks of lines in, events out.

A parser is fed `LineBlock`s (many complete lines at once, see `trainvisor.stream.lines`)
so that a fast parser can scan a whole block with one regex; a parser that thinks
in lines subclasses `LineParser` and implements `parse_line`.

A text line of a block may hold several states of one physical line that the child
rewrote (progress bars: ``\\r``, ``\\b``), separated by ``\\r``, in the order a reader saw
them; `parse_line` is called once per state, with the line's one number. A parser
that scans a whole block treats ``\\r`` as the start of a state, never as a new line.
"""
from __future__ import annotations

from dataclasses import field
from typing import ClassVar, Iterable, Optional, Protocol, Sequence, runtime_checkable

from .._frozen import frozen
from ..events import Event, LineBlock

__all__ = ["Parser", "LineParser", "ParserOptions"]


@frozen
class ParserOptions:
    """What a parser may need to know about the run it parses.

    `year`: glog-style timestamps carry no year; a live run passes the current
    year, a replay the year of the log file's mtime.
    `iters_per_epoch`: lets iteration-only formats (Caffe) report an epoch.
    `argv`: the supervised command, for parsers that choose by it (``auto``).
    """

    year: Optional[int] = None
    iters_per_epoch: Optional[int] = None
    argv: Sequence[str] = field(default_factory=tuple)


@runtime_checkable
class Parser(Protocol):
    name: ClassVar[str]
    description: ClassVar[str]

    def feed(self, block: LineBlock) -> list[Event]:
        """Events for the lines of `block`, in line order. A parser whose events carry the
        block's stream already says so with a class attribute ``stamps_stream = True`` (the
        pipeline then skips its copy); others leave the stream to the pipeline."""
        ...

    def finish(self) -> list[Event]:
        """End of the stream: events held back waiting for more lines."""
        ...


class LineParser:
    """Base for parsers that look at one line at a time."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def __init__(self, options: ParserOptions | None = None) -> None:
        self.options = options or ParserOptions()

    def parse_line(self, text: str, number: int, wall_time: float) -> Optional[Iterable[Event]]:
        raise NotImplementedError

    def feed(self, block: LineBlock) -> list[Event]:
        return self.feed_lines(block, self.parse_line)

    @staticmethod
    def feed_lines(block: LineBlock, parse_line) -> list[Event]:
        """`parse_line` over the lines of `block` (over each state of a rewritten line):
        a subclass may pick a cheaper `parse_line` for a whole block."""
        out: list[Event] = []
        number = block.first_line
        wall = block.wall_time
        lines = block.text.split("\n")
        lines.pop()
        if "\r" in block.text:
            return LineParser._feed_states(lines, number, wall, parse_line)
        for text in lines:
            events = parse_line(text, number, wall)
            if events:
                out.extend(events)
            number += 1
        return out

    @staticmethod
    def _feed_states(lines: list[str], number: int, wall: float, parse_line) -> list[Event]:
        out: list[Event] = []
        for line in lines:
            out.extend(LineParser.parse_states(parse_line, line, number, wall))
            number += 1
        return out

    @staticmethod
    def parse_states(parse_line, line: str, number: int, wall: float) -> list[Event]:
        """`parse_line` over each state of one text line (one state when it was never rewritten)."""
        if "\r" not in line:
            return parse_line(line, number, wall) or []
        out: list[Event] = []
        for text in line.split("\r"):
            events = parse_line(text, number, wall)
            if events:
                out.extend(events)
        return out

    def finish(self) -> list[Event]:
        return []
