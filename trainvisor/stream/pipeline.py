"""The one path from lines to sinks, shared by `run` and `replay`: blocks -> parser -> line
hooks and sinks. Owned by whoever owns the sinks (a `Run`, a replay): it outlives one source, so
a restarted child's output goes to the same sinks through a fresh parser (`restart`)."""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable, Sequence

from .._frozen import frozen
from ..events import Event, LineBlock, LineRecord, with_stream
from .faults import FaultCounter

if TYPE_CHECKING:
    from ..parsers.base import Parser
    from ..sinks.base import Sink

__all__ = ["Pipeline", "PipelineStats", "LineHook"]

log = logging.getLogger("trainvisor.stream.pipeline")

LineHook = Callable[[LineRecord], None]


def _component_name(obj: object) -> str:
    name = getattr(obj, "name", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return str(name)


@frozen
class PipelineStats:
    """What the pipeline has seen so far (a snapshot: safe to hand to another thread)."""

    lines: int = 0
    events: int = 0
    truncated_lines: int = 0
    binary_bytes: int = 0
    """Bytes that looked binary (stream/engine.py `looks_binary`): passed through, not parsed."""


class Pipeline:
    """Feeds blocks to the parser and line hooks, and the parser's events to sinks.

    Runs on one thread (the supervisor's pipeline thread, or the caller of
    replay); every call into user or plug-in code is contained by `faults`.
    """

    def __init__(
        self,
        parser: "Parser",
        *,
        sinks: Sequence["Sink"] = (),
        hooks: Sequence[LineHook] = (),
        flush_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.parser = parser
        # A parser whose events say their block's stream already (`stamps_stream`) is not second-guessed.
        self._stamps_stream = bool(getattr(parser, "stamps_stream", False))
        self.sinks = list(sinks)
        self.hooks = [(h, "hook " + _component_name(h)) for h in hooks]
        self.faults = FaultCounter(log)
        self._lines = self._events = self._truncated = self._binary = 0
        self.flush_interval = flush_interval
        self._clock = clock
        self._last_flush = clock()
        self._parser_name = "parser " + _component_name(parser)
        # The streams this parser has read: when it read only one (a replay's "log"), what it releases
        # at finish came from that one; with two (a child's stdout and stderr) that is not known here,
        # and the parser's own stream stands (the last block's would be a guess: a run that ended on
        # a stderr warning would have filed a held stdout bar as stderr).
        self._streams: set[str] = set()

    @property
    def stats(self) -> PipelineStats:
        return PipelineStats(self._lines, self._events, self._truncated, self._binary)

    def skip_binary(self, nbytes: int) -> None:
        """`nbytes` of a stream that looked binary went by unparsed (the engine counts them here)."""
        self._binary += nbytes

    def feed(self, block: LineBlock) -> None:
        self._lines += block.count
        if block.truncated:
            self._truncated += len(block.truncated)
        if self.hooks:
            self._run_hooks(block)
        try:
            events = self.parser.feed(block)
        except Exception as exc:  # a parser bug must not stop the run
            self.faults.record(self._parser_name, exc)
            events = None
        self._streams.add(block.stream)
        if events:
            if block.stream != "stdout" and not self._stamps_stream:  # parsers read text; the block knows the stream
                events = with_stream(events, block.stream)
            self._dispatch(events)
        self.tick()

    def records(self, events: Sequence[Event]) -> None:
        """Records a source made itself (a followed metric file: `source.Records`), to the sinks
        as the parser's are, except a sink that reads the console's records only (`console_only`:
        the timeline, whose epochs would go back and forth between two sources); no parser or
        line hook sees them."""
        if events:
            events = list(events)
            self._events += len(events)
            for sink in self.sinks:
                if getattr(sink, "console_only", False):
                    continue
                try:
                    sink.write(events)
                except Exception as exc:
                    self.faults.record("sink " + _component_name(sink), exc)
        self.tick()

    def tick(self) -> None:
        """Flush sinks when `flush_interval` has passed; called per block and when idle."""
        now = self._clock()
        if now - self._last_flush >= self.flush_interval:
            self._last_flush = now
            self._each_sink("flush")

    def finish(self) -> None:
        """End of input: drain the parser, flush and close the sinks."""
        self._finish_parser()
        self._each_sink("flush")
        self._each_sink("begin_close", optional=True)  # threaded sinks drain at once: the end waits for the slowest
        self._each_sink("close")

    def restart(self, parser: "Parser") -> None:
        """A new source for the same sinks (a restarted child): what the old parser held back is
        released, and `parser` (fresh, so no state of the last attempt leaks) reads from here on."""
        self._finish_parser()
        self.parser = parser
        self._stamps_stream = bool(getattr(parser, "stamps_stream", False))
        self._parser_name = "parser " + _component_name(parser)
        self._streams = set()
        self._each_sink("flush")

    def _finish_parser(self) -> None:
        try:
            events = self.parser.finish()
        except Exception as exc:
            self.faults.record(self._parser_name, exc)
            events = None
        if events:
            # What a parser held back (a Rich bar waiting for its continuation lines) came from its
            # one stream, if it read only one: a replay's records all say "log", released at the end or not.
            if len(self._streams) == 1 and not self._stamps_stream:
                (stream,) = self._streams
                if stream != "stdout":
                    events = with_stream(events, stream)
            self._dispatch(events)

    # -- internals ---------------------------------------------------------

    def _run_hooks(self, block: LineBlock) -> None:
        hooks = self.hooks
        for record in block.records():
            for hook, name in hooks:
                try:
                    hook(record)
                except Exception as exc:
                    self.faults.record(name, exc)

    def _dispatch(self, events: list[Event]) -> None:
        self._events += len(events)
        for sink in self.sinks:
            try:
                sink.write(events)
            except Exception as exc:
                self.faults.record("sink " + _component_name(sink), exc)

    def _each_sink(self, method: str, optional: bool = False) -> None:
        """`method` of every sink, each failure recorded; `optional`: a sink without it is passed over."""
        for sink in self.sinks:
            if optional and not hasattr(sink, method):
                continue
            try:
                getattr(sink, method)()
            except Exception as exc:
                self.faults.record("sink " + _component_name(sink), exc)
