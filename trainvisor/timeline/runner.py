"""Where a run's callbacks run: their own thread, fed by the pipeline, the watcher and the Run.

The `Timeline` is cheap and pure, so it runs inline on the pipeline thread (`TimelineSink`): it
sees every metric, and no dropped record can make it miss an epoch. What it derives goes to
`CallbackThread`, one daemon thread (`trainvisor-callbacks`) that calls the callbacks, so a slow
callback never slows parsing. Its queue holds at most `capacity` `batch_end` events: when that
is full a new `batch_end` is dropped and counted (one per iteration, they are the only numerous
kind); every other event (train_begin, epoch_end, test_end, checkpoint, train_end) is always
queued, as they are few and a callback counts on them. The watcher's thread puts complete
checkpoints (`CheckpointForward`) and an upload worker verified ones; the Run puts train_begin
and train_end. At the end the Run waits for the thread within `callbacks.close_timeout`; a
callback still busy then is abandoned (daemon thread), logged and counted, and never holds the exit.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from .derive import Timeline
from .dispatch import Dispatcher
from .events import CheckpointReached, TimelineEvent

if TYPE_CHECKING:
    from concurrent.futures import Future

    from ..events import Checkpoint

__all__ = ["CallbackThread", "TimelineSink", "CheckpointForward", "CallbackCounts"]

log = logging.getLogger("trainvisor.callbacks")


@dataclass(frozen=True)
class CallbackCounts:
    """At the end: events each callback was given (`dispatched`), batch_end events dropped on a
    full queue, events left undelivered when the thread was abandoned, and hook failures."""

    dispatched: int
    dropped: int
    abandoned: int
    failures: int
    stop_reason: Optional[str]


class CallbackThread:
    def __init__(self, dispatcher: Dispatcher, *, capacity: int) -> None:
        self.dispatcher, self.capacity = dispatcher, capacity
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: deque = deque()
        self._batches = 0  # batch_end events queued
        self._busy = False  # the thread is in a callback now
        self._closing = False
        self.dropped = self.abandoned = 0
        self._thread: Optional[threading.Thread] = None
        self._done = threading.Event()
        self.counts: Optional[CallbackCounts] = None  # set by the first close

    def put(self, events: Sequence[TimelineEvent]) -> None:
        """From any thread; never waits."""
        if not events:
            return
        with self._lock:
            if self._closing:
                self.dropped += len(events)
                return
            for ev in events:
                if ev.kind == "batch_end":
                    if self._batches >= self.capacity:
                        self.dropped += 1
                        continue
                    self._batches += 1
                self._queue.append(ev)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="trainvisor-callbacks", daemon=True)
                self._thread.start()
            self._wake.notify()

    def close(self, timeout: float) -> CallbackCounts:
        """Let the thread call the callbacks with what is queued, waiting at most `timeout`
        (the first call; a later one returns the same counts)."""
        if self.counts is not None:
            return self.counts
        with self._lock:
            self._closing = True
            started = self._thread is not None
            self._wake.notify()
        if started and not self._done.wait(timeout):
            with self._lock:
                self.abandoned = len(self._queue) + self._busy  # the rest, and the event in a callback now
                self._queue.clear()
            log.error("a callback is still busy at the end of the run (close timeout %gs): abandoned, %d event(s) "
                      "undelivered", timeout, self.abandoned)
        d = self.dispatcher
        for component, n in sorted(d.faults.counts.items()):
            log.warning("%s raised %d time(s); the training went on", component, n)
        if self.dropped:
            log.warning("callbacks: %d event(s) dropped (the callbacks fell behind; batch_end events are "
                        "dropped first)", self.dropped)
        self.counts = CallbackCounts(sum(d.events.values()), self.dropped, self.abandoned, d.faults.total,
                                     d.stop_reason)
        return self.counts

    def _work(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._queue and not self._closing:
                        self._wake.wait()
                    if not self._queue:
                        return
                    ev = self._queue.popleft()
                    if ev.kind == "batch_end":
                        self._batches -= 1
                    self._busy = True
                self.dispatcher.dispatch(ev)  # contains every callback's exception itself
                with self._lock:
                    self._busy = False
        finally:
            self._done.set()


class TimelineSink:
    """An inline sink (on the pipeline thread): the metric stream into the `Timeline`, what it
    completes onto the callbacks' queue; `close` (the pipeline's end) releases what was open."""

    name = "timeline"
    # The console's records only: a followed metric file's (`--follow`) come in bursts, out of
    # step with the console's, and their epochs would start a new training at each going back.
    console_only = True

    def __init__(self, out: Callable[[Sequence[TimelineEvent]], None], timeline: Optional[Timeline] = None) -> None:
        self._out = out
        self.timeline = timeline or Timeline()
        self._closed = False

    def write(self, events: Sequence[object]) -> None:
        self._out(self.timeline.feed(events))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._out(self.timeline.finish())
            if self.timeline.late_values:
                log.info("timeline: %d value(s) came after their epoch had ended with its validation (in no "
                         "epoch_end; see docs/timeline.md)", self.timeline.late_values)


class CheckpointForward:
    """A watcher consumer: a complete checkpoint set becomes a `checkpoint` event (state
    ``complete``); with an upload manager, the set is handed on to it and its outcome, when the
    future resolves (on an upload worker), becomes a second one (``verified``, `ok` False when
    it failed). The watcher's own consumers still get every set first."""

    def __init__(self, out: Callable[[Sequence[TimelineEvent]], None], manager: object = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._out, self._manager, self._clock = out, manager, clock

    def submit(self, checkpoint: "Checkpoint") -> object:
        future = self._manager.submit(checkpoint) if self._manager is not None else None
        self._out([self._event(checkpoint, "complete")])
        if future is not None:
            future.add_done_callback(lambda f: self._outcome(checkpoint, f))
        return future

    def _outcome(self, checkpoint: "Checkpoint", future: "Future") -> None:
        try:
            state = future.result().state
        except BaseException as exc:  # a cancelled or failed upload is an outcome too
            state = f"{type(exc).__name__}: {exc}"
        if state in ("queued", "skipped"):  # stopped before it finished, or superseded: no upload outcome
            return
        self._out([self._event(checkpoint, "verified", ok=state == "verified",
                               error="" if state == "verified" else state)])

    def _event(self, cp: "Checkpoint", state: str, ok: bool = True, error: str = "") -> CheckpointReached:
        return CheckpointReached(state, cp.name, tuple(f.path for f in cp.files), cp.iteration, cp.epoch,
                                 self._clock(), ok, error)
