"""What a source hands the stream engine: its bytes, in order, per stream.

A source (a child's pipe readers, a saved log, a followed file) produces `Chunk`s of bytes,
`Gap`s where bytes passed by unparsed, one `Eof` per stream and, at its very end, `End`. A
live source and the engine run on different threads: they meet in a `Channel`, whose
`ByteBudget`s let the source shed parsing (never the pass-through) when the engine falls
too far behind.
"""
from __future__ import annotations

import queue
import time
from typing import Callable, Iterator, NamedTuple, Optional, Union

__all__ = ["Chunk", "Gap", "Eof", "End", "Records", "Item", "ByteBudget", "Channel", "READ_SIZE"]

# What a source reads at once: a live run's pipe readers and a replay alike. Larger blocks are
# slower, not faster: a block with one non-ASCII character is a str of 2 or 4 bytes a character,
# and at 256 KiB (a fresh 1 MiB mapping for each) the bench's mixed log replayed 1.3x (generic)
# to 2.4x (caffe) slower.
READ_SIZE = 64 * 1024
#: What of each stream's backlog is still parsed once the time after the child's end is up.
TAIL_BYTES = 256 * 1024


class Chunk(NamedTuple):
    stream: str
    data: bytes
    time: float
    wall_time: float


class Gap(NamedTuple):
    """Bytes that were passed through but not parsed because the engine fell too far behind;
    `newlines` keeps line numbers right after it."""

    stream: str
    size: int
    newlines: int
    ends_with_newline: bool


class Eof(NamedTuple):
    """The stream ended: its last line, even without a newline, is complete."""

    stream: str


class End(NamedTuple):
    """The source has nothing more (every stream it opened has had its Eof)."""


class Records(NamedTuple):
    """Records a source made itself, not lines to parse: a metric file followed beside the log
    (`--follow`). The engine hands them to the pipeline's sinks as they are; `source` names the
    file, as their `stream` does."""

    source: str
    events: tuple


Item = Union[Chunk, Gap, Eof, End, Records]


class ByteBudget:
    """Bytes handed to the engine and not yet taken. Each counter has one writer thread (the
    source adds, the channel's reader takes), so no lock is needed."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.produced = 0
        self.consumed = 0
        self.line_cap: Optional[int] = None
        """The engine's max_line: a source need not hand on what lies beyond it in a line."""

    def in_flight(self) -> int:
        return self.produced - self.consumed


class Channel:
    """A live source's items on their way to the engine's thread. `put` is the source's (any
    thread, never blocks); `items` the engine's: it yields None when nothing came for
    `idle` seconds, so the pipeline can flush its sinks while the training is quiet."""

    def __init__(self, backlog: int, streams: tuple[str, ...] = ("stdout", "stderr"), *,
                 clock: Callable[[], float] = time.monotonic, tail_bytes: int = TAIL_BYTES) -> None:
        self._queue: "queue.SimpleQueue[Item]" = queue.SimpleQueue()
        self.put = self._queue.put
        self.budgets = {s: ByteBudget(backlog // len(streams)) for s in streams}
        self._clock = clock
        self._deadline: Optional[float] = None
        self._tailed = False
        self.tail_bytes = tail_bytes
        self.shed_bytes = 0
        """Bytes taken after the deadline: handed on as `Gap`s, passed through but not parsed."""

    def cap_lines(self, max_line: int) -> None:
        """The engine reads at most `max_line` bytes of a line's segment (stream/lines.py): the
        source may pass a longer line's tail over (a `Gap` without a newline, not counted)."""
        for budget in self.budgets.values():
            budget.line_cap = max_line

    def parse_until(self, deadline: float) -> None:
        """The source has ended (the child exited): when `clock()` passes `deadline` with a
        backlog still queued, each stream's last `TAIL_BYTES` (from a line's start) are parsed
        and what precedes them is not, only counted (`shed_bytes`) and handed on as gaps: a
        backlog the parser cannot grind through holds trainvisor's exit for a bounded time, and
        the training's last lines (its final scores) are the ones still read."""
        self._deadline = deadline

    def items(self, idle: float) -> Iterator[Optional[Item]]:
        get, budgets = self._queue.get, self.budgets
        while True:
            try:
                item = get(timeout=idle)
            except queue.Empty:
                yield None
                continue
            if type(item) is Chunk:
                budgets[item.stream].consumed += len(item.data)
                if self._deadline is not None and self._clock() > self._deadline:
                    if not self._tailed:
                        self._tailed = True
                        backlog = self._backlog(item)
                        yield from backlog
                        if backlog and type(backlog[-1]) is End:
                            return
                        continue
                    item = self._shed(item)
            yield item
            if type(item) is End:
                return

    def _backlog(self, first: Chunk) -> list[Item]:
        """Everything queued (the source has ended), with each stream's head shed and its
        last TAIL_BYTES kept, cut at a line's start."""
        items: list[Item] = [first]
        while type(items[-1]) is not End:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if type(item) is Chunk:
                self.budgets[item.stream].consumed += len(item.data)
            items.append(item)
        room: dict[str, int] = {}
        keep: list[int] = [0] * len(items)
        for i in range(len(items) - 1, -1, -1):  # from the end: how much of each chunk is tail
            item = items[i]
            if type(item) is Chunk:
                left = room.setdefault(item.stream, self.tail_bytes)
                keep[i] = min(len(item.data), left)
                room[item.stream] = left - keep[i]
        out: list[Item] = []
        for item, kept in zip(items, keep):
            if type(item) is not Chunk or kept == len(item.data):
                out.append(item)
                continue
            data = item.data
            cut = data.find(b"\n", len(data) - kept - 1) + 1 if kept else 0  # the kept part starts a line
            if 0 < cut < len(data):
                out.append(self._shed(item._replace(data=data[:cut])))
                out.append(item._replace(data=data[cut:]))
            else:
                out.append(self._shed(item))
        return out

    def _shed(self, chunk: Chunk) -> Gap:
        data = chunk.data
        self.shed_bytes += len(data)
        return Gap(chunk.stream, len(data), data.count(b"\n"), data.endswith(b"\n"))
