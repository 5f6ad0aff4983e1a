"""Replay a saved log through the same engine, parser and sinks as a live run: the log is
a source like a child's pipes (`engine.file_items`), driven by the one loop (`StreamEngine`)."""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, BinaryIO, Callable, Sequence

from .engine import READ_SIZE, StreamEngine, file_items
from .lines import DEFAULT_MAX_LINE
from .pipeline import LineHook, Pipeline, PipelineStats

if TYPE_CHECKING:
    from ..parsers.base import Parser
    from ..sinks.base import Sink

__all__ = ["replay", "replay_stream", "REPLAY_CHUNK", "REPLAY_STREAM"]

REPLAY_CHUNK = READ_SIZE  # blocks of the size a live run reads: the same blocks, the same cost
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
    engine = StreamEngine(pipeline, max_line=max_line, clock=clock, wall_clock=wall_clock)
    engine.drive(file_items(stream, REPLAY_STREAM, chunk_size=chunk_size, clock=clock, wall_clock=wall_clock))
    pipeline.finish()
    return pipeline.stats


def replay(
    path: str | os.PathLike,
    parser: "Parser",
    *,
    sinks: Sequence["Sink"] = (),
    hooks: Sequence[LineHook] = (),
    max_line: int = DEFAULT_MAX_LINE,
) -> PipelineStats:
    """Parse a saved log exactly as `trainvisor run` would have parsed it live."""
    pipeline = Pipeline(parser, sinks=sinks, hooks=hooks)
    with open(path, "rb") as fh:
        return replay_stream(fh, pipeline, max_line=max_line)
