"""Counting every sink's records, and running the sinks that are not cheap off the pipeline thread.

A sink that talks to the network (a webhook, a metrics server) may wait seconds per write; on the
pipeline thread that wait would stop parsing, and a full pipe would stop the training.
`ThreadedSink` gives such a sink its own daemon thread behind a queue bounded in records, and in
seconds of its own writing (`backlog`, at the CPU its records have taken so far): `write` never
waits (a batch that does not fit is dropped whole and its records counted). A thread of its
own is not enough on its own: Python runs one thread at a time, and a sink thread busy writing
(formatting JSON, building protocol buffers) holds the interpreter for 5 ms at a go while the
pipeline thread waits for it after every chunk it reads; with five such sinks the pipeline parsed a
tenth of what it parses alone. So a threaded sink takes at most `cpu_share` of the interpreter: after
each batch it pauses in proportion to the CPU time the batch took (a sink waiting on the network uses
none, and is not paused), and what it cannot take in that share fills its queue and is dropped,
counted. At the end the pauses stop: what it holds is written as fast as it goes. And at the end
of the run the sinks share one bounded wait (`CloseDeadline`); a sink still busy then is
abandoned, logged and counted, and never holds the exit. `CountingSink` is the inline
counterpart: the same counts for a sink that runs on the pipeline thread.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import field
from typing import Callable, Optional, Sequence

from .._frozen import frozen
from ..defaults import SINK_CPU_SHARE
from ..stream.faults import FaultCounter

__all__ = ["SinkCounts", "CountingSink", "ThreadedSink", "CloseDeadline"]

log = logging.getLogger("trainvisor.sinks")


@frozen
class SinkCounts:
    """One sink's records at the end of a run: `written` (its write returned), `dropped` (never
    handed to it: its queue was full, or it was still busy when the run ended: `abandoned`),
    `failed` (its write raised). Together they are every record the run gave it. `cpu_seconds`:
    the CPU its writes took (its own thread's for a threaded sink, the pipeline's for an inline
    one): what the sink costs the machine the training runs on."""

    name: str
    written: int = 0
    dropped: int = 0
    failed: int = 0
    threaded: bool = False
    abandoned: bool = False
    cpu_seconds: float = field(default=0.0, compare=False)  # a measurement, not a count


class CloseDeadline:
    """One bound on the end-of-run wait for all threaded sinks together: it starts when the first
    of them is closed, so N stuck sinks hold the exit `timeout` seconds, not N times that."""

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self._clock = clock
        self._end: Optional[float] = None
        self._lock = threading.Lock()

    def cap(self, seconds: float) -> None:
        """At most `seconds` from now (a shutdown's share of its grace), if that is sooner."""
        with self._lock:
            self.timeout = min(self.timeout, max(0.0, seconds))
            if self._end is not None:
                self._end = min(self._end, self._clock() + self.timeout)

    def remaining(self) -> float:
        with self._lock:
            if self._end is None:
                self._end = self._clock() + self.timeout
            return max(0.0, self._end - self._clock())


class CountingSink:
    """An inline sink, counted. A failing write is counted here and raised on to the pipeline,
    which logs and contains it; `close` is idempotent (the run closes again whatever it built)."""

    threaded = False

    def __init__(self, sink: object, label: str, *, cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self.sink, self.name = sink, label
        self.written = self.failed = 0
        self.cpu = 0.0
        self._cpu_clock = cpu_clock  # a batch is hundreds of records: one clock read each way is noise
        self._closed = False

    def write(self, events: Sequence[object]) -> None:
        started = self._cpu_clock()
        try:
            self.sink.write(events)
        except Exception:
            self.failed += len(events)
            raise
        finally:
            self.cpu += self._cpu_clock() - started
        self.written += len(events)

    def flush(self) -> None:
        self.sink.flush()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.sink.close()

    def counts(self) -> SinkCounts:
        return SinkCounts(self.name, self.written, 0, self.failed, cpu_seconds=round(self.cpu, 4))


class ThreadedSink:
    """`sink` on a daemon thread of its own behind a queue of at most `capacity` records (one
    batch larger than that is taken when the queue is empty). Its exceptions are logged and
    counted on its thread; none reaches the pipeline."""

    threaded = True

    def __init__(self, sink: object, label: str, *, capacity: int, deadline: CloseDeadline,
                 cpu_share: float = SINK_CPU_SHARE, backlog: float = 0.0,
                 cpu_clock: Callable[[], float] = time.thread_time,
                 pause: Optional[Callable[[float], object]] = None) -> None:
        self.sink, self.name, self.capacity, self._deadline = sink, label, capacity, deadline
        self.cpu_share = cpu_share
        self.backlog = backlog  # seconds of its own writing it may hold (0: `capacity` alone)
        self._cpu_clock = cpu_clock  # this thread's CPU seconds (time waiting on I/O is not counted)
        self._ending = threading.Event()  # set at close: no more pauses
        self._pause = pause or self._ending.wait  # woken early by close
        self.written = self.dropped = self.failed = 0
        self.cpu = 0.0
        self.abandoned = False
        self._said_full = False
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._batches: deque = deque()
        self._pending = 0  # records queued, not yet taken by the thread
        self._in_flight = 0  # records the thread is writing now
        self._flush_wanted = self._closing = self._waited = False
        self._thread: Optional[threading.Thread] = None
        self._done = threading.Event()
        self._faults = FaultCounter(log)
        # A sink's slow set-up (an import of most of a second) runs on its thread now, before the
        # training's output comes, not at the first write, where it would hold the interpreter
        # while the pipeline has a backlog to parse.
        self._prepare = callable(getattr(sink, "prepare", None))
        if self._prepare:
            self._start()

    @property
    def deadline(self) -> CloseDeadline:
        """The end-of-run bound it shares with the run's other threaded sinks (a shutdown caps it)."""
        return self._deadline

    def write(self, events: Sequence[object]) -> None:
        n = len(events)
        with self._lock:
            if self._fits(n):
                self._batches.append(list(events))  # the caller's list is not ours to keep
                self._pending += n
                self._start()
                self._wake.notify()
                return
            self.dropped += n
            if self._closing:
                return
            full = (f"its queue of {self.capacity} records is full" if self._pending + n > self.capacity else
                    f"its queue holds its share of sinks.backlog ({self.backlog:g}s of its writing)")
        self._say_dropping(full + " (it writes slower than records come)")

    def has_room(self, n: int) -> bool:
        """Whether a batch of `n` records would be taken now (`write` would not drop it)."""
        with self._lock:
            return self._fits(n)

    def _fits(self, n: int) -> bool:
        """(Under the lock.) Not closing, and room for `n` more: within `capacity` records and
        within `backlog` seconds of writing at the CPU its records have taken so far. A batch
        larger than either is taken when the queue is empty, so no batch is too big to ever be
        written."""
        if self._closing:
            return False
        if not self._pending:
            return True
        if self._pending + n > self.capacity:
            return False
        done = self.written + self.failed
        return not (self.backlog and done and (self._pending + n) * self.cpu > self.backlog * done)

    def skip(self, n: int) -> None:
        """`n` records never handed to it, counted as dropped: a batch its feeder did not even
        decode, the sinks being a queue or more behind (the sink host under a flood)."""
        with self._lock:
            self.dropped += n
        self._say_dropping(f"it is more than its queue ({self.capacity} records) behind the metrics file")

    def _say_dropping(self, why: str) -> None:
        """Once a run, the first drop: the summary has the count; a person reading the run log
        as it goes learns here why a chart has gaps."""
        with self._lock:
            first, self._said_full = not self._said_full, True
        if first:
            log.warning("sink %s: %s: dropping what does not fit, counted; metrics.jsonl has every record",
                        self.name, why)

    def flush(self) -> None:
        with self._lock:
            if self._thread is not None and not self._closing:
                self._flush_wanted = True
                self._wake.notify()

    def begin_close(self) -> None:
        """Let the thread write what it holds, flush and close the sink, without waiting: the
        closer of several threaded sinks begins every close first, so their drains overlap and
        the end of a run waits for the slowest, not for the sum (at the end of a flood each holds
        a full queue: its share of `sinks.backlog`)."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._start()
            self._wake.notify()
        self._ending.set()

    def close(self) -> None:
        """`begin_close`, then wait at most what the shared deadline leaves; then give up on it
        (its unwritten records counted as dropped)."""
        with self._lock:
            waited = self._waited
            self._waited = True
        if waited:
            return
        self.begin_close()
        if self._done.wait(self._deadline.remaining()):
            return
        with self._lock:
            self.abandoned = True
            lost = self._pending + self._in_flight
            self.dropped += lost
            self._batches.clear()
            self._pending = self._in_flight = 0
        log.error("sink %s is still busy at the end of the run (close timeout %gs): abandoned, %d record(s) "
                  "unwritten", self.name, round(self._deadline.timeout, 2), lost)

    def counts(self) -> SinkCounts:
        """Its records written, dropped and failed. A sink that holds records of its own after its
        `write` returned (the webhook's queue while the receiver is down) says what became of them
        through `delivery()` (a SinkCounts): its written replace the queue's, its losses add up."""
        own = getattr(self.sink, "delivery", None)
        inner = own() if callable(own) else None
        with self._lock:
            cpu = round(self.cpu, 4)
            if inner is None:
                return SinkCounts(self.name, self.written, self.dropped, self.failed, True, self.abandoned, cpu)
            return SinkCounts(self.name, inner.written, self.dropped + inner.dropped, self.failed + inner.failed,
                              True, self.abandoned, cpu)

    # -- the sink's own thread ------------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=f"trainvisor-sink-{self.name}", daemon=True)
            self._thread.start()

    def _work(self) -> None:
        try:
            if self._prepare:
                self._call("prepare")
            while self._step():
                pass
            self._call("flush")
            self._call("close")
        finally:
            self._done.set()

    def _step(self) -> bool:
        """Write one batch or flush once; False when closing and nothing is left."""
        with self._lock:
            while not (self._batches or self._flush_wanted or self._closing):
                self._wake.wait()
            if self._batches:
                batch = self._batches.popleft()
                self._pending -= len(batch)
                self._in_flight = len(batch)
            elif self._flush_wanted:
                self._flush_wanted = False
                batch = None
            else:
                return False
        if batch is None:
            self._call("flush")
            return True
        cpu = self._cpu_clock()
        ok = self._call("write", batch)
        used = self._cpu_clock() - cpu
        with self._lock:
            if not self.abandoned:  # once abandoned, its records were counted as dropped
                if ok:
                    self.written += len(batch)
                else:
                    self.failed += len(batch)
            self._in_flight = 0
            self.cpu += used
        if used > 0 and self.cpu_share < 1 and not self._ending.is_set():
            self._pause(used * (1 - self.cpu_share) / self.cpu_share)
        return True

    def _call(self, method: str, *args: object) -> bool:
        try:
            getattr(self.sink, method)(*args)
            return True
        except Exception as exc:  # a sink's bug is logged and counted, never raised into the run
            self._faults.record("sink " + self.name, exc)
            return False
