"""Replay a saved log through the same splitter, parser and sinks as a live run."""
from __future__ import annotations

import os
import time
from typing import BinaryIO, Callable, Sequence

from .lines import DEFAULT_MAX_LINE, LineSplitter
from ..parsers.base import Parser
from .pipeline import LineHook, Pipeline, PipelineStats
from ..sinks.base import Sink

__all__ = ["replay", "replay_stream", "REPLAY_CHUNK"]

# What a live run's reader takes at once (supervisor/readers.READ_SIZE): blocks of the same size
# as live. Larger ones are slower, not faster: a block with one non-ASCII character is a str of 2
# or 4 bytes a character, and at 256 KiB (a fresh 1 MiB mapping for each) the bench's mixed log
# replayed 1.3x (generic) to 2.4x (caffe) slower.
REPLAY_CHUNK = 64 * 1024
REPLAY_STREAM = "log"


def replay_stream(
    stream: BinaryIO,
    pipeline: Pipeline,
    *,
    max_line: int = DEFAULT_MAX_LINE,
    chunk_size: int = REPLAY_CHUNK,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> PipelineStats:
    """Feed a binary stream to `pipeline` and finish it."""
    splitter = LineSplitter(REPLAY_STREAM, max_line=max_line)
    read = stream.read
    feed = pipeline.feed
    while True:
        chunk = read(chunk_size)
        if not chunk:
            break
        block = splitter.feed(chunk, clock(), wall_clock())
        if block is not None:
            feed(block)
    block = splitter.finish(clock(), wall_clock())
    if block is not None:
        feed(block)
    pipeline.finish()
    return pipeline.stats


def replay(
    path: str | os.PathLike,
    parser: Parser,
    *,
    sinks: Sequence[Sink] = (),
    hooks: Sequence[LineHook] = (),
    max_line: int = DEFAULT_MAX_LINE,
) -> PipelineStats:
    """Parse a saved log exactly as `trainvisor run` would have parsed it live."""
    pipeline = Pipeline(parser, sinks=sinks, hooks=hooks)
    with open(path, "rb") as fh:
        return replay_stream(fh, pipeline, max_line=max_line)
