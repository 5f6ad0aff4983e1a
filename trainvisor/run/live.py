"""A child's output through the stream engine: the Supervisor makes the bytes, the engine
turns them into lines, metrics and sink writes on the pipeline thread, and `drive_child`
joins the two for one attempt. `supervise()` is the one-call form (a pipeline of its own);
a `Run` keeps its pipeline across attempts and calls `drive_child` for each."""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from .._frozen import frozen
from ..stream.engine import StreamEngine
from ..stream.lines import DEFAULT_MAX_LINE
from ..stream.pipeline import LineHook, Pipeline, PipelineStats
from ..stream.source import Channel, End
from ..supervisor.supervisor import ProcessResult, Supervisor

if TYPE_CHECKING:
    from ..parsers.base import Parser, ParserOptions
    from ..sinks.base import Sink

__all__ = ["RunResult", "supervise", "drive_child", "DEFAULT_PARSE_BACKLOG"]

log = logging.getLogger("trainvisor.stream.engine")

# How far parsing may fall behind the child before bytes are passed through unparsed (and
# counted) rather than held in memory.
DEFAULT_PARSE_BACKLOG = 256 * 1024 * 1024
# How long parsing may go on after the child's pipes are read to their end: what is still queued
# then is passed over, counted as not parsed (a 24 MB progress-bar storm took 7 s to grind through).
# 1.2 s, not more: trainvisor's own end after it (the parser's finish, the sinks, the summary) took
# another ~0.4 s in bench/pathological.py, and the exit is to come within 2 s of the child's.
PARSE_AFTER_EXIT = 1.2


@frozen
class RunResult:
    """One supervised child: how it ended (`process`, whose fields read through: `result.exit_code`,
    `result.returncode`, `result.signal` ...) and what was parsed (`stats`, `faults` per component)."""

    process: ProcessResult
    stats: PipelineStats
    faults: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy/pickle probing: not the process's
            raise AttributeError(name)
        return getattr(self.process, name)

    @classmethod
    def of(cls, process: ProcessResult, pipeline: Pipeline) -> "RunResult":
        return cls(process, pipeline.stats, MappingProxyType(dict(pipeline.faults.counts)))


def drive_child(supervisor: Supervisor, pipeline: Pipeline, *, max_line: int = DEFAULT_MAX_LINE,
                side: Sequence[Any] = (), parse_after_exit: float = PARSE_AFTER_EXIT) -> ProcessResult:
    """Run `supervisor`'s child with its bytes driven through `pipeline` on the pipeline thread;
    returns when the child has ended and everything it wrote is parsed, or `parse_after_exit`
    seconds after its pipes ended (the rest passed over, counted in `unparsed_bytes`). The pipeline is not
    finished: it may take another source (a restarted child). `side`: sources beside the child's
    pipes (`run.follow.MetricFollower`): started with the channel's `put`, stopped (their last
    items put) before the engine's end."""
    channel = supervisor.channel
    if channel is None:
        raise ValueError("drive_child needs a Supervisor with a channel")
    engine = StreamEngine(pipeline, max_line=max_line)
    channel.cap_lines(max_line)

    def drive() -> None:
        try:
            engine.drive(channel.items(pipeline.flush_interval))
        except Exception:  # the pipeline contains plug-ins' faults: this is trainvisor's own bug
            log.exception("the stream engine failed; the training's output still passes through")

    thread = threading.Thread(target=drive, name="trainvisor-pipeline", daemon=True)
    thread.start()
    for source in side:
        source.start(channel.put)
    try:
        result = supervisor.run()
    finally:
        channel.parse_until(time.monotonic() + parse_after_exit)
        for source in side:
            source.stop()
        channel.put(End())  # every reader has put its Eof: the engine ends after them
        thread.join()
    if channel.shed_bytes:
        log.info("%d bytes still queued %.1fs after the child's end were not parsed", channel.shed_bytes,
                 parse_after_exit)
        result = dataclasses.replace(result, unparsed_bytes=result.unparsed_bytes + channel.shed_bytes)
    return result


def supervise(argv: Sequence[str], *, parser: "Parser | str" = "auto", parser_options: Optional["ParserOptions"] = None,
              sinks: Sequence["Sink"] = (), hooks: Sequence[LineHook] = (), max_line: int = DEFAULT_MAX_LINE,
              parse_backlog: int = DEFAULT_PARSE_BACKLOG, **process: Any) -> RunResult:
    """Run `argv` once under supervision with its output parsed into `sinks`: the Supervisor's
    keyword arguments (`stdout_fd`, `forward_signals`, `kill_timeout`, `pty`, ...) pass through.

    >>> supervise(["sh", "-c", "echo loss=0.5"], sinks=[...]).exit_code  # doctest: +SKIP
    0
    """
    if isinstance(parser, str):
        from ..parsers import ParserOptions, create_parser

        opts = parser_options or ParserOptions(year=time.localtime().tm_year, argv=tuple(argv))
        parser = create_parser(parser, opts)
    pipeline = Pipeline(parser, sinks=sinks, hooks=hooks)
    supervisor = Supervisor(argv, channel=Channel(parse_backlog), **process)
    try:
        result = drive_child(supervisor, pipeline, max_line=max_line)
    finally:
        pipeline.finish()
    return RunResult.of(result, pipeline)
