"""The sink host's process: `python -m trainvisor.sinks.host`, started by a run (handle.py).

It reads its start on stdin, lowers its CPU priority (the training and the run's parsing come
first), makes the sinks with the run's registry, each on a thread of its own behind a queue bounded
as in the run (`ThreadedSink`, `sinks.queue`: a sink that falls behind drops what does not fit,
counted, as it would in the run), and feeds them what metrics.jsonl holds from the run's offset on.
A stretch of the file more than a queue behind its end, or that no sink has room for, is counted,
not decoded: under a flood the host keeps up with the file at the cost of counting its lines, so
the run never waits on it for more than what the queues hold; and while the training runs the
host keeps to `sinks.cpu_share` of one core: its reader half of it (`CpuGovernor`), its sinks
the other half in equal parts (ThreadedSink's pauses). A failing sink is contained and counted as in the run (a sink's own
queue, the webhook's, through its `delivery()`). It ends when the run sends the file's final
length (read to it, close the sinks within the run's remaining wait, print the counts) or when
stdin ends without it (the run died: what the file holds is read, the sinks closed, and the host
exits: it never outlives the run by more than that)."""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Callable, Optional

from ...defaults import SINK_CLOSE_TIMEOUT
from ...stream.faults import FaultCounter
from ..threaded import CloseDeadline, ThreadedSink
from .follower import JsonlFollower
from .wire import HostStart, counts_line, log_line, read_control, read_start

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
        self.within: Optional[float] = None  # seconds the run still waits once it sent the end
        self.eof = False
        self.ended = threading.Event()  # the final length came, or stdin ended: no more waiting
        threading.Thread(target=self._read, args=(stdin,), name="sinkhost-stdin", daemon=True).start()

    def _read(self, stdin) -> None:
        for line in stdin:
            c = read_control(line)
            if c.outcome is not None:
                self.outcome = c.outcome
            if c.end is not None:
                self.within = c.within
                self.end = c.end
                self.ended.set()
        self.eof = True
        self.ended.set()


def main() -> int:
    root = logging.getLogger()
    root.addHandler(_RecordLines())
    root.setLevel(logging.INFO)
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
        log.error("sink host: a bad start line: %s", exc)
        return 2
    controls = _Controls(stdin)  # first: the run may end while the sinks are being made (a slow import)
    deadline = CloseDeadline(SINK_CLOSE_TIMEOUT)  # capped by what the run still waits, at the end
    # While the training runs the host takes `cpu_share` of one core: half for its reader (what
    # every sink is fed from), half for the sinks in equal parts, so a slow one (MLflow's file
    # store: ~50 us a metric) drops its own records instead of starving the others.
    reader_share, sink_share = ((start.cpu_share / 2, start.cpu_share / (2 * max(1, len(start.sinks))))
                                if start.cpu_share < 1 else (1.0, 1.0))
    sinks = _make(start, deadline, sink_share)
    follower = JsonlFollower(start.path, start.offset)
    faults = FaultCounter(log)
    unread = _pump(follower, sinks, controls, start.queue, CpuGovernor(reader_share, cpu=time.thread_time))
    if controls.within is not None:
        deadline.cap(controls.within * CLOSE_SHARE)
    if controls.outcome is not None:
        _tell(sinks, controls.outcome, faults)
    for s in sinks:
        s.begin_close()  # every sink drains what it holds at once: the wait is the slowest's, not the sum
    if unread is not None:  # counted meanwhile: every sink dropped it
        skipped = follower.count_records(*unread)
        for s in sinks:
            if skipped:
                s.skip(skipped)
    for s in sinks:
        s.close()  # ... within the shared deadline
    follower.close()
    out = sys.stdout.buffer
    out.write(counts_line([s.counts() for s in sinks]))
    out.flush()
    return 0


def _make(start: HostStart, deadline: CloseDeadline, share: float = 1.0) -> list:
    """Each sink made with its options, as the run would make it; one that cannot be made is
    said and left out (the run has made each once already: this is the rare case where the
    host's environment differs)."""
    from ..context import SinkContext
    from ..registry import make_sink

    context = SinkContext(run_id=start.run_id, run_dir=start.run_dir, attempt=start.attempt,
                          config=_config(start.config), identity=dict(start.identity))
    sinks: list = []
    for i, (name, options) in enumerate(start.sinks):
        label = start.labels[i] if i < len(start.labels) else name  # the run's label: its counts are found by it
        try:
            _, sink = make_sink(name, options, context)
        except Exception as exc:
            log.error("sink %s: cannot be made in the sink host: %s", label, exc)
            sink = _Broken(label)
        # its slow set-up (an import) starts now, on its thread, before the file has much to say
        sinks.append(ThreadedSink(sink, label, capacity=start.queue, deadline=deadline, cpu_share=share,
                                  backlog=start.backlog / len(start.sinks)))
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


class CpuGovernor:
    """Keeps the host's reader (its thread's CPU: `cpu`) to `share` of one core while the
    training runs: a bucket of CPU seconds, filled at `share` a wall second and holding at most
    one `window`'s worth (an hour of quiet banks no hour of CPU for the next flood), from which
    the CPU is taken as it is used; a burst is paid back by waiting. `pace` says how long until
    the bucket is above zero again; what comes meanwhile falls more than a queue behind and is
    counted, not decoded. (The sinks keep to their parts on their own threads: ThreadedSink's
    `cpu_share`.)"""

    def __init__(self, share: float, *, window: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.process_time) -> None:
        self.share, self.window, self._clock, self._cpu = share, window, clock, cpu
        self._tokens = share * window
        self._wall, self._used = clock(), cpu()

    def pace(self) -> float:
        """Seconds to wait now (0: go on)."""
        if self.share >= 1:
            return 0.0
        wall, used = self._clock(), self._cpu()
        filled = min(self.share * self.window, self._tokens + (wall - self._wall) * self.share)
        self._tokens = filled - (used - self._used)
        self._wall, self._used = wall, used
        return 0.0 if self._tokens > 0 else -self._tokens / self.share


def _pump(follower: JsonlFollower, sinks: list, controls: _Controls, queue: int,
          governor: Optional[CpuGovernor] = None) -> Optional[tuple[int, int]]:
    """Feed every record up to the final length (or, stdin gone, up to what the file holds). A
    stretch is decoded and handed to the sinks (each drops what its queue cannot take) unless it
    lies more than `queue` records behind the file's end or no sink has room for it: then it is
    counted as dropped by every sink, undecoded. The file is the host's own queue, bounded as the
    run's threaded sinks' queues are, so at the end the host is never more than that behind.
    Until the end is known, `governor` paces it: under a flood the training's cores stay the
    training's (nice +10 alone did not do that: measured, a busy host cut the run's parsing by a
    third on two cores). Once the end is known, a middle more than a queue's worth of records
    before it is passed over unread: returned as (start, stop) for the caller to count while the
    sinks drain what they hold (a flood's file is hundreds of MB; reading it first made every
    sink's close wait for that)."""
    last_flush = time.monotonic()
    seen_bytes = seen = 0  # what was read so far: the size of a record, to find the last queue's worth
    unread: Optional[tuple[int, int]] = None
    while True:
        end, gone = controls.end, controls.eof
        if end is None and gone:
            end = follower.size()  # the run died: what it wrote is all there will be
        if end is not None and unread is None and seen:
            tail = end - queue * seen_bytes // seen  # where the last `queue` records begin, about
            if tail - follower.offset > follower.chunk:
                unread = follower.pass_over(tail)
        data = follower.read_lines(end)
        n = follower.records_in(data) if data else 0
        if n:
            seen_bytes, seen = seen_bytes + len(data), seen + n
            behind = (end if end is not None else follower.size()) - follower.offset
            if behind * n > queue * len(data) or not any(s.has_room(n) for s in sinks):
                for s in sinks:
                    s.skip(n)
            else:
                events = follower.decode(data)
                for s in sinks:
                    s.write(events)  # a sink without room drops the batch, counted
        elif not data and end is not None:  # nothing left up to the end (or the file was cut by hand)
            return unread
        elif not data:
            controls.ended.wait(POLL)
        wait = governor.pace() if governor is not None and end is None else 0.0
        if wait > 0:
            controls.ended.wait(wait)  # woken at once by the end
        now = time.monotonic()
        if now - last_flush >= FLUSH:
            last_flush = now
            for s in sinks:
                s.flush()


def _tell(sinks: list, outcome: tuple[int, bool], faults: FaultCounter) -> None:
    for s in sinks:
        hook = getattr(s.sink, "set_outcome", None)
        if callable(hook):
            try:
                hook(*outcome)
            except Exception as exc:
                faults.record("sink " + s.name + " set_outcome", exc)


class _RecordLines(logging.Handler):
    """Each record as one line on stderr (wire.log_line), its traceback as text beside it."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tb = logging.Formatter().formatException(record.exc_info) if record.exc_info else None
            sys.stderr.buffer.write(log_line(record.levelno, record.getMessage(), tb))
            sys.stderr.buffer.flush()
        except Exception:  # as logging's own handlers: a broken record never ends the host
            self.handleError(record)


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
