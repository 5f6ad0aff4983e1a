"""The sink host's process: `python -m trainvisor.sinks.host`, started by a run (handle.py).

It reads its start on stdin, lowers its CPU priority (the training and the run's parsing come
first), makes the sinks with the run's registry, and writes them what metrics.jsonl holds from the
run's offset on, in batches, one sink after another on this thread: a sink is only given more
when it has taken the last batch, so a flood waits in the file, never dropped. A failing sink is
contained and counted as in the run (`CountingSink`; a sink's own queue, the webhook's, through
its `delivery()`). It ends when the run sends the file's final length (read to it, close, print
the counts) or when stdin ends without it (the run died: what the file holds is read, the sinks
closed, and the host exits: it never outlives the run by more than that)."""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Optional

from ...stream.faults import FaultCounter
from ..threaded import CountingSink, SinkCounts
from .follower import JsonlFollower
from .wire import HostStart, counts_line, read_control, read_start

__all__ = ["main", "NICE"]

log = logging.getLogger("trainvisor.sinks")

NICE = 10  # below the training and the run: the host catches up when they leave it a core
POLL = 0.2  # seconds between looks at the file when it has nothing new
FLUSH = 1.0  # the sinks flushed at least this often, as the run's pipeline flushes its own
CLOSE_SHARE = 0.7  # of the time the run still waits at the end, the part for writing; the rest closes


class _Controls:
    """The control lines of stdin, read on a thread of their own: how the training ended, the
    file's final length, and whether stdin ended (the run is gone)."""

    def __init__(self, stdin) -> None:
        self.outcome: Optional[tuple[int, bool]] = None
        self.end: Optional[int] = None
        self.stop_at: Optional[float] = None  # monotonic time: stop writing, count the rest as dropped
        self.eof = False
        self.changed = threading.Event()
        threading.Thread(target=self._read, args=(stdin,), name="sinkhost-stdin", daemon=True).start()

    def _read(self, stdin) -> None:
        for line in stdin:
            c = read_control(line)
            if c.outcome is not None:
                self.outcome = c.outcome
            if c.end is not None:
                if c.within is not None:
                    self.stop_at = time.monotonic() + c.within * CLOSE_SHARE
                self.end = c.end
                self.changed.set()
        self.eof = True
        self.changed.set()


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the run's to hear: it ends us by stdin
    try:
        os.nice(NICE)
    except OSError:
        pass
    stdin = sys.stdin.buffer
    first = stdin.readline()
    try:
        start = read_start(first)
    except (ValueError, TypeError) as exc:
        log.error("a bad start line: %s", exc)
        return 2
    controls = _Controls(stdin)  # first: the run may end while the sinks are being made (a slow import)
    sinks = _make(start)
    follower = JsonlFollower(start.path, start.offset)
    faults = FaultCounter(log)
    left = _pump(follower, sinks, controls, faults)
    if controls.outcome is not None:
        _tell(sinks, controls.outcome, faults)
    for s in sinks:
        _each(s, "flush", faults)
        _each(s, "close", faults)
    follower.close()
    out = sys.stdout.buffer
    out.write(counts_line([_counts(s, left) for s in sinks]))
    out.flush()
    return 0


def _make(start: HostStart) -> list:
    """Each sink made with its options, as the run would make it; one that cannot be made is
    said and left out (the run has made each once already: this is the rare case where the
    host's environment differs)."""
    from ..context import SinkContext
    from ..registry import make_sink

    context = SinkContext(run_id=start.run_id, run_dir=start.run_dir, attempt=start.attempt,
                          config=_config(start.config), identity=dict(start.identity))
    sinks: list = []
    for name, options in start.sinks:
        label = name if all(s.name != name for s in sinks) else f"{name}#{len(sinks) + 1}"
        try:
            _, sink = make_sink(name, options, context)
        except Exception as exc:
            log.error("sink %s: cannot be made in the sink host: %s", label, exc)
            sink = _Broken(label)
        prepare = getattr(sink, "prepare", None)
        if callable(prepare):  # its slow import now, before the file has much to say
            try:
                prepare()
            except Exception as exc:
                log.error("sink %s: prepare failed: %s: %s", label, type(exc).__name__, exc)
        sinks.append(CountingSink(sink, label, cpu_clock=time.thread_time))
    return sinks


def _config(shown):
    """The run's configuration as the run showed it (secrets masked), read as a factory reads a
    RunConfig (`context.config.upload.credentials`); None for a replay's (none)."""
    return ShownConfig(shown) if isinstance(shown, dict) else None


class ShownConfig(dict):
    """A shown configuration, by key or by attribute. Not rebuilt into a RunConfig: a masked
    secret does not read back (a RunConfig refuses `***`), and no sink needs the secret."""

    def __getattr__(self, name: str):
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        return ShownConfig(value) if isinstance(value, dict) else value


def _pump(follower: JsonlFollower, sinks: list, controls: _Controls, faults: FaultCounter) -> Optional[int]:
    """Write every record up to the final length (or, stdin gone, up to what the file holds).
    None when all were written; else the records left unwritten when the run's wait ran out."""
    last_flush = time.monotonic()
    while True:
        end, gone = controls.end, controls.eof
        if controls.stop_at is not None and time.monotonic() >= controls.stop_at and end is not None:
            left = follower.lines_left(end)
            if left:
                log.warning("the run's close timeout is near: %d record(s) left unwritten", left)
                return left
        if end is None and gone:
            end = follower.size()  # the run died: what it wrote is all there will be
        before = follower.offset
        events = follower.read(end)
        if events:
            for s in sinks:
                _each(s, "write", faults, events)
        elif follower.offset != before:  # lines that are no sink's records (notices)
            continue
        elif end is not None:  # nothing left up to the end (or the file is shorter: cut by hand)
            return None
        else:
            controls.changed.wait(POLL)
            controls.changed.clear()
        now = time.monotonic()
        if now - last_flush >= FLUSH:
            last_flush = now
            for s in sinks:
                _each(s, "flush", faults)


def _each(sink: CountingSink, method: str, faults: FaultCounter, *args) -> None:
    try:
        getattr(sink, method)(*args)
    except Exception as exc:  # counted by CountingSink (a write); logged here, never the end of the host
        faults.record("sink " + sink.name, exc)


def _tell(sinks: list, outcome: tuple[int, bool], faults: FaultCounter) -> None:
    for s in sinks:
        hook = getattr(s.sink, "set_outcome", None)
        if callable(hook):
            try:
                hook(*outcome)
            except Exception as exc:
                faults.record("sink " + s.name + " set_outcome", exc)


def _counts(s: CountingSink, left: Optional[int]) -> SinkCounts:
    """Its counts as the run's threaded sinks give them: a sink's own queue (`delivery()`)
    replaces its written and adds its losses; the records left unwritten at the end, dropped
    (abandoned, as a threaded sink still busy at the run's close timeout)."""
    c = s.counts()
    if left:
        c = SinkCounts(c.name, c.written, left, c.failed, abandoned=True, cpu_seconds=c.cpu_seconds)
    own = getattr(s.sink, "delivery", None)
    inner = own() if callable(own) else None
    if inner is None:
        return c
    return SinkCounts(c.name, inner.written, c.dropped + inner.dropped, c.failed + inner.failed,
                      abandoned=c.abandoned, cpu_seconds=c.cpu_seconds)


class _Broken:
    """A sink the host could not make: every write fails, counted."""

    def __init__(self, name: str) -> None:
        self.name = name

    def write(self, events) -> None:
        raise RuntimeError(f"sink {self.name} could not be made in the sink host")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
