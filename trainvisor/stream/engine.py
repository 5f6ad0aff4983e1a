"""`StreamEngine`: the one drive loop, from a source's items to the pipeline.

Every source goes through it: the child's pipes in a run (through a `Channel`, on the
pipeline thread), a saved log in a replay (read here, on the caller's thread), a followed
file. It keeps one `LineSplitter` per stream for one source; the `Pipeline` behind it is
the owner's and outlives the source, so a restarted child feeds the same sinks.

A stream's encoding is decided from its first chunk, as a replay decides a saved file's from
its head (`encoding.detect_encoding`): a child that writes UTF-16 (a Windows tool's redirect
replayed by a fake training) or GB18030 is read as the replay of its log would read it. The
pass-through is never touched: only what is parsed is transcoded.
"""
from __future__ import annotations

import time
from typing import BinaryIO, Callable, Iterable, Iterator, Optional

from .encoding import detect_encoding, stream_decoder
from .lines import DEFAULT_MAX_LINE, LineSplitter
from .pipeline import Pipeline
from .source import READ_SIZE, Chunk, End, Eof, Gap, Item, Records

__all__ = ["StreamEngine", "file_items", "READ_SIZE"]


# C0 controls no text log carries (not NUL, which preallocated log files are padded with, nor the
# tab, newline, carriage return, backspace, form feed, vertical tab and escape that terminals use)
_CONTROLS = bytes([*range(0x01, 0x08), *range(0x0E, 0x1B), *range(0x1C, 0x20), 0x7F])
BINARY_SHARE = 1 / 32
"""A chunk with more control bytes than this share is binary (random bytes have ~10%)."""


def looks_binary(data: bytes) -> bool:
    """Whether a chunk is binary output (a program dumping a tensor or an image to its stdout):
    not parsed, so 50 MB of it costs a second of the pipeline's time, not minutes of regex
    searches and terminal emulation over "lines" of garbage (it was 14.6 s after the child had
    exited). Counted, never silent; its newlines still count, so later line numbers stay right."""
    n = len(data)
    return n > 256 and (n - len(data.translate(None, _CONTROLS))) > n * BINARY_SHARE


class StreamEngine:
    """Splits each stream of a source into lines and feeds them to `pipeline`."""

    def __init__(self, pipeline: Pipeline, *, max_line: int = DEFAULT_MAX_LINE,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time) -> None:
        self.pipeline = pipeline
        self.max_line = max_line
        self._clock = clock
        self._wall = wall_clock

    def drive(self, items: Iterable[Optional[Item]]) -> None:
        """Feed one source to its end (`End`, or its items exhausted). None is a quiet moment:
        the pipeline flushes its sinks if their interval has passed. The pipeline is not
        finished here: its owner finishes it once, after its last source."""
        pipeline = self.pipeline
        feed = pipeline.feed
        splitters: dict[str, LineSplitter] = {}
        decoders: dict[str, Callable[[bytes], bytes]] = {}  # streams that are not UTF-8
        for item in items:
            kind = type(item)
            if kind is Chunk:
                data = item.data
                splitter = splitters.get(item.stream)
                if splitter is None:
                    splitter = self._splitter(splitters, item.stream)
                    encoding = detect_encoding(data, strict=True)
                    if encoding is not None:
                        decoders[item.stream] = stream_decoder(encoding)
                if decoders and item.stream in decoders:
                    data = decoders[item.stream](data)
                if looks_binary(data):
                    pipeline.skip_binary(len(data))
                    splitter.skip(data.count(b"\n"), data.endswith(b"\n"))
                    continue
                block = splitter.feed(data, item.time, item.wall_time)
                if block is not None:
                    feed(block)
            elif item is None:
                pipeline.tick()
            elif kind is Gap:
                (splitters.get(item.stream) or self._splitter(splitters, item.stream)).skip(
                    item.newlines, item.ends_with_newline)
            elif kind is Eof:
                splitter = splitters.pop(item.stream, None)
                block = splitter.finish(self._clock(), self._wall()) if splitter is not None else None
                if block is not None:
                    feed(block)
            elif kind is Records:
                pipeline.records(item.events)
            elif kind is End:
                break
        for splitter in splitters.values():  # a source that ended without an Eof for a stream
            block = splitter.finish(self._clock(), self._wall())
            if block is not None:
                feed(block)

    def _splitter(self, splitters: dict[str, LineSplitter], stream: str) -> LineSplitter:
        splitter = splitters[stream] = LineSplitter(stream, max_line=self.max_line)
        return splitter


def file_items(fh: BinaryIO, stream: str, *, chunk_size: int = READ_SIZE,
               clock: Callable[[], float] = time.monotonic,
               wall_clock: Callable[[], float] = time.time) -> Iterator[Item]:
    """A saved log as a source: its bytes as one stream, then its Eof and End."""
    read = fh.read
    while True:
        data = read(chunk_size)
        if not data:
            break
        yield Chunk(stream, data, clock(), wall_clock())
    yield Eof(stream)
    yield End()
