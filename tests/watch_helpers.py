"""The checkpoint-watcher tests' tools: a consumer that records, a fake clock, and a harness that
waits on what the watcher has handled instead of sleeping.

The real observer (inotify or polling) still reports the real filesystem; only the watcher's
time (settling, partial sets, the end-of-run wait) is the test's. A test writes, waits until the
watcher has handled an event about the file (`Harness.saw`), then moves the clock on
(`Harness.advance`, which waits until the watcher has checked its time rules at the new time).
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from trainvisor.events import Checkpoint
from trainvisor.watch import CheckpointWatcher
from trainvisor.watch.fsevents import FileMoved, Tick, WatchEvent

MB = 1 << 20
WAIT = 10.0  # seconds a condition may take on a loaded machine before the test fails


class Recorder:
    """A consumer that records each checkpoint with the real time it was handed over and the sizes
    its files had then."""

    def __init__(self) -> None:
        self.got: list[tuple[float, Checkpoint, dict[str, int]]] = []
        self.cond = threading.Condition()

    def submit(self, cp: Checkpoint) -> None:
        sizes = {f.relpath: os.path.getsize(f.path) for f in cp.files}
        with self.cond:
            self.got.append((time.monotonic(), cp, sizes))
            self.cond.notify_all()

    def wait(self, n: int, timeout: float = WAIT) -> list[Checkpoint]:
        with self.cond:
            self.cond.wait_for(lambda: len(self.got) >= n, timeout)
            return [cp for _, cp, _ in self.got]

    @property
    def names(self) -> list[str]:
        return [cp.name for _, cp, _ in self.got]


class FakeClock:
    """The watcher's clock and sleep: time moves only when the test advances it, or when the
    watcher naps at the end of the run (its naps pass at once)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def _paths(event: WatchEvent) -> tuple[Optional[str], ...]:
    if isinstance(event, FileMoved):
        return (event.src, event.dest)
    return (getattr(event, "path", None),)


class Seen:
    """The watcher's `on_handled`: every event it has handled, in order, to wait on."""

    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self.cond = threading.Condition()

    def __call__(self, event: WatchEvent) -> None:
        with self.cond:
            self.events.append(event)
            self.cond.notify_all()

    def count(self, path: "str | Path", kind: Optional[type] = None) -> int:
        """Events handled about `path` (of `kind`, when given)."""
        p = str(path)
        with self.cond:
            return sum(1 for e in self.events if p in _paths(e) and (kind is None or isinstance(e, kind)))

    def wait_for(self, what: str, done: Callable[[], bool]) -> None:
        with self.cond:
            if not self.cond.wait_for(done, WAIT):
                last = [e for e in self.events if not isinstance(e, Tick)][-10:]
                raise AssertionError(f"the watcher never handled {what} (its last events: {last})")


class Harness:
    """A CheckpointWatcher on a FakeClock, with `Seen` as its `on_handled`; a context manager
    like the watcher (leaving it stops the watcher, draining unless an exception is on its way)."""

    def __init__(self, dirs: list, consumer: object, **kwargs: object) -> None:
        self.clock = FakeClock()
        self.seen = Seen()
        self.watcher = CheckpointWatcher(dirs, consumer=consumer, clock=self.clock, sleep=self.clock.sleep,
                                         on_handled=self.seen, **kwargs)
        self.stats = self.watcher.stats

    def __enter__(self) -> "Harness":
        self.watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.watcher.stop(drain=exc[0] is None)

    def saw(self, path: "str | Path", more_than: int = 0, kind: Optional[type] = None) -> None:
        """Wait until the watcher has handled more than `more_than` events about `path`."""
        self.seen.wait_for(f"an event about {path}", lambda: self.seen.count(path, kind) > more_than)

    def advance(self, seconds: float) -> None:
        """Move the clock on, then wait until the watcher has checked its time rules at the new time."""
        self.clock.sleep(seconds)
        tick = self.watcher.tick()
        self.seen.wait_for("the tick", lambda: any(e is tick for e in reversed(self.seen.events)))

    def settled(self, rec: Recorder, n: int, path: "str | Path", more_than: int = 0) -> list[Checkpoint]:
        """Wait until the watcher knows `path`'s latest write (an event about it beyond `more_than`),
        then let settle time pass until `n` checkpoints are handed over. Two steps are enough: the
        first sees a state the observer had not reported yet, the second finds it unchanged."""
        self.saw(path, more_than)
        for _ in range(3):
            if len(rec.got) >= n:
                break
            self.advance(self.watcher.settle)
        return rec.wait(n)


def write_in_steps(path: Path, h: Optional[Harness], rec: Optional[Recorder] = None, *, chunks: int = 10,
                   chunk: int = MB, step: float = 0.1) -> float:
    """Write `chunks` chunks of zeros. With a harness, after each chunk but the last, wait until the
    watcher has handled an event about the file and move its clock on by `step` (a slow writer, as
    the watcher sees it); with `rec`, check that nothing more was handed over meanwhile. Returns the
    real monotonic time of the last write (just before the close: the watcher may react to the close
    before this thread runs again)."""
    handed = len(rec.got) if rec is not None else 0
    with open(path, "wb") as fh:
        for i in range(chunks):
            before = h.seen.count(path) if h is not None else 0
            fh.write(b"\0" * chunk)
            fh.flush()
            if h is not None and i < chunks - 1:
                h.saw(path, before)
                h.advance(step)
                assert rec is None or len(rec.got) == handed, f"handed over while chunk {i + 1} of {chunks} was written"
        last_write = time.monotonic()
    return last_write
