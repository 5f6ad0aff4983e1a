"""`CheckpointWatcher`: the thread around the `CheckpointTracker`.

It owns the watchdog observer, the queue and the watcher's own thread. watchdog's thread and
the pipeline thread only enqueue typed events (`fsevents`); this thread feeds them to the
tracker, which decides what is complete (see `tracker` for the rules), and hands the
checkpoints it returns to the consumer (the upload manager). Directory scans, watches on
directories that appear late, and the end-of-run reconciliation happen here too.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Callable, Iterable, Optional, Protocol, Sequence, runtime_checkable

from watchdog.observers.api import BaseObserver

from ..defaults import PARTIAL_AFTER, SETTLE
from ..events import Checkpoint
from .announce import AnnouncementSink
from .announced import directory_to_watch
from .fsevents import Announced, DirAppeared, FileFound, FileStat, Stop, Tick, WatchEvent, WatchRequested
from .observe import EnqueueHandler, RootWatches, make_observer
from .policy import UploadPolicy
from .recognizers import Recognizer, default_recognizers
from .tracker import CheckpointTracker, StatFn, WatcherStats, stat_file

__all__ = ["CheckpointConsumer", "CheckpointWatcher", "AnnouncementSink", "WatcherStats"]

log = logging.getLogger("trainvisor.watch")


@runtime_checkable
class CheckpointConsumer(Protocol):
    """What the watcher hands checkpoints to. `submit` must not block for long
    (the upload manager queues and uploads on its own threads)."""

    def submit(self, checkpoint: Checkpoint) -> object: ...


class CheckpointWatcher:
    """Watch `dirs` for checkpoints and hand complete ones to `consumer`.

    `partial_after`: a set whose present files are all complete but which still
    lacks a required file (a Caffe weights file whose solverstate never comes) is
    handed over as it is after this many seconds, and at `stop()`.
    `include_existing`: also hand over checkpoints already in the directories at
    start (default no: they belong to an earlier run).

    `clock` and `sleep` are the watcher's time (settling, partial sets, the end-of-run wait for
    files still settling). `on_handled` is called on the watcher's thread with each event once it
    is handled (queued ones, and the FileFound/Announced events of its own scans). A test passes a
    fake clock whose `sleep` advances it, and waits on `on_handled` instead of sleeping."""

    def __init__(self, dirs: Iterable[str], *, consumer: CheckpointConsumer,
                 recognizers: Optional[Sequence[Recognizer]] = None, poll: bool = False,
                 settle: float = SETTLE, policy: UploadPolicy = UploadPolicy(),
                 partial_after: float = PARTIAL_AFTER, include_existing: bool = False,
                 clock: Callable[[], float] = time.monotonic, poll_interval: Optional[float] = None,
                 cwd: Optional[str] = None, observer_factory: Optional[Callable[[], BaseObserver]] = None,
                 stat: StatFn = stat_file, follow_announcements: bool = True, shallow: Iterable[str] = (),
                 sleep: Callable[[float], object] = time.sleep,
                 on_handled: Optional[Callable[[WatchEvent], object]] = None) -> None:
        """`follow_announcements`: a checkpoint the log announces outside every root makes its
        directory a root (see `watch_announced`); off, only `dirs` are watched. `shallow`: more
        directories, watched for their own files only (not their subdirectories)."""
        self.cwd = cwd or os.getcwd()
        self.follow_announcements = follow_announcements
        self._shallow = frozenset(os.path.abspath(os.path.join(self.cwd, d)) for d in shallow)
        self.roots = sorted({os.path.abspath(os.path.join(self.cwd, d)) for d in dirs} | self._shallow,
                            key=len, reverse=True)
        self.consumer = consumer
        self.recognizers = list(recognizers) if recognizers is not None else default_recognizers()
        self.poll, self.settle, self.policy = poll, settle, policy
        self.include_existing = include_existing
        self.clock, self._stat, self._sleep, self._on_handled = clock, stat, sleep, on_handled
        self.poll_interval = poll_interval if poll_interval is not None else max(0.05, min(1.0, settle / 4))
        self._observer_factory = observer_factory or (
            lambda: make_observer(poll=self.poll, poll_interval=self.poll_interval))
        self.tracker = CheckpointTracker(self.roots, self.recognizers, poll=poll, settle=settle, policy=policy,
                                         partial_after=partial_after, clock=clock, stat=stat, shallow=self._shallow)
        self.stats: WatcherStats = self.tracker.stats
        self._q: "queue.SimpleQueue[WatchEvent]" = queue.SimpleQueue()
        self._observer: Optional[BaseObserver] = None
        self._handler = EnqueueHandler(self._q, renames_are_proof=not poll)
        self._thread: Optional[threading.Thread] = None
        self._initial: dict[str, FileStat] = {}
        self._watches: Optional[RootWatches] = None
        # Held while watches change and while stop() retires them: a watch added on this thread
        # while the observer stops would start an emitter nobody stops (a leaked thread).
        self._watches_lock = threading.Lock()
        self._started_ns = 0                    # wall clock at start: older files belong to earlier runs
        self._home = os.path.expanduser("~")
        self._unwatchable: set[str] = set()     # announced paths said once to be left unwatched
        self._syncs: dict[int, tuple[Tick, threading.Event]] = {}  # sync(): ticks waited for, by id

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> "CheckpointWatcher":
        if self._thread is not None:
            return self
        self._started_ns = time.time_ns()
        self._observer = self._observer_factory()
        self._watches = RootWatches(self.roots, self._observer, self._handler, self._scan, shallow=self._shallow)
        self._watches.ensure(initial=True)
        self._observer.start()
        if self.include_existing:
            for root in self.roots:
                if os.path.isdir(root):
                    self._scan(root)
        else:
            self._initial = dict(self._existing())
        self._thread = threading.Thread(target=self._loop, name="trainvisor-watch", daemon=True)
        self._thread.start()
        return self

    def wait_quiet(self, *, quiet: float, timeout: float) -> bool:
        """Until no file event has come for `quiet` seconds (a checkpoint written as the training
        exited: its last writes delivered), at most `timeout`; False if files were still changing.
        The observer's times are monotonic (observe.py), so this compares with time.monotonic."""
        deadline = time.monotonic() + timeout
        while True:
            since = time.monotonic() - self._handler.last_event
            if since >= quiet:
                return True
            if time.monotonic() >= deadline:
                return False
            self._sleep(max(0.0, min(quiet - since, deadline - time.monotonic())))

    def stop(self, *, drain: bool = True, timeout: float = 10.0) -> None:
        """Stop watching. With `drain`, first process what is queued, hand over the
        sets the run ended with (partial ones, the `last` policy's checkpoint)."""
        if self._thread is None:
            return
        if drain:
            self._await_quiet()
        with self._watches_lock:
            self._watches = None  # from now on no watch is added; roots added late are swept by _finish
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout)
        self._q.put(Stop(drain))
        self._thread.join(timeout + (self.settle if drain else 0.0))
        self._thread = None
        log.info("checkpoint watcher stopped: %s", self.stats.summary())

    def __enter__(self) -> "CheckpointWatcher":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(drain=exc[0] is None)

    def announcement_sink(self) -> AnnouncementSink:
        """A pipeline sink that feeds the parser's CheckpointEvents to this watcher."""
        return AnnouncementSink(self)

    def announce(self, path: str) -> None:
        """Evidence from the log that `path` is completely written (thread-safe)."""
        self._q.put(Announced(os.path.join(self.cwd, path)))

    def tick(self) -> Tick:
        """Check the time rules (settling, partial sets) now, not at the next idle timeout: for a
        caller whose clock jumps (a test's fake clock). The Tick returned is the one `on_handled`
        sees once it has been handled (thread-safe)."""
        tick = Tick()
        self._q.put(tick)
        return tick

    @property
    def is_running(self) -> bool:
        return self._thread is not None

    def _await_quiet(self) -> None:
        """Let the observer deliver what the last writes caused: until it has been quiet for a
        moment (inotify delivers in well under 1 ms), one second at most."""
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and time.monotonic() - self._handler.last_event < 0.1:
            time.sleep(0.02)

    def sync(self, timeout: float) -> bool:
        """Wait until every event queued before this call is handled and no file is still
        settling (the sets complete then are handed over): a restart reads what the crashed
        child completed. False when `timeout` passed first."""
        deadline = time.monotonic() + timeout
        while self._thread is not None:
            self._await_quiet()  # the files' last close events delivered first, as stop() does
            tick, done = Tick(), threading.Event()
            self._syncs[id(tick)] = (tick, done)
            self._q.put(tick)
            try:
                if not done.wait(max(0.0, deadline - time.monotonic())):
                    return False
            finally:
                self._syncs.pop(id(tick), None)
            if not self.tracker.settling:  # no file still waiting for its close or its quiet
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll_interval)
        return True

    def watch_announced(self, path: str, *, directory: bool = False) -> None:
        """The log announced a checkpoint at `path` (a directory checkpoint with `directory`):
        watch where it is, from now on, if no root covers it (see `announced`). Pipeline thread."""
        if not self.follow_announcements:
            return
        target = directory_to_watch(path, directory=directory, cwd=self.cwd, home=self._home)
        if target is not None:
            self._q.put(WatchRequested(target))
        elif not directory and os.path.dirname(os.path.normpath(os.path.join(self.cwd, path))) in self._shallow:
            return  # a file in a directory watched for its own files: covered
        elif path not in self._unwatchable and len(self._unwatchable) < 100:
            self._unwatchable.add(path)
            log.info("checkpoint %s announced where the run does not watch (give --watch for it)", path)

    # -- the watcher's thread --------------------------------------------------------
    def _loop(self) -> None:
        last_ensure = self.clock()
        while True:
            try:
                event: WatchEvent = self._q.get(timeout=self.poll_interval if self.tracker.settling else 0.5)
            except queue.Empty:
                event = Tick()
            if isinstance(event, Stop):
                self._drain_queue()
                if event.drain:
                    try:
                        self._finish()
                    except Exception:
                        log.exception("checkpoint watcher: error at the end of the run")
                return
            self._handle_safely(event)
            now = self.clock()
            try:
                if now - last_ensure >= 0.5 and self._ensure_watches():
                    last_ensure = now
            except Exception:  # the watcher must keep going; a failed re-watch is logged, not fatal
                log.exception("checkpoint watcher: error re-resolving watches")

    def _drain_queue(self) -> None:
        while True:
            try:
                event = self._q.get_nowait()
            except queue.Empty:
                return
            if not isinstance(event, Stop):
                self._handle_safely(event)

    def _handle_safely(self, event: WatchEvent) -> None:
        """Handle one event, then tell `on_handled`; neither failing stops the watcher."""
        try:
            self._handle(event)
        except Exception:  # the watcher must keep going; one bad event is logged, not fatal
            log.exception("checkpoint watcher: error handling %r", event)
        self._report(event)

    def _feed_own(self, event: WatchEvent) -> None:
        """An event the watcher makes itself (a file a scan found, a file of an announced
        directory): fed at once, and reported like a queued one."""
        self._hand_over(self.tracker.feed(event))
        self._report(event)

    def _report(self, event: WatchEvent) -> None:
        waited = self._syncs.get(id(event))
        if waited is not None and waited[0] is event:
            waited[1].set()
        if self._on_handled is None:
            return
        try:
            self._on_handled(event)
        except Exception:  # an observer of the watcher failing never stops it
            log.exception("checkpoint watcher: on_handled failed for %r", event)

    def _handle(self, event: WatchEvent) -> None:
        if isinstance(event, WatchRequested):
            self._add_root(event.path)
            return
        if isinstance(event, Announced) and os.path.isdir(event.path):
            for dirpath, _dirs, names in os.walk(event.path):  # a directory checkpoint: its files
                for n in names:
                    self._feed_own(Announced(os.path.join(dirpath, n)))
            return
        if isinstance(event, DirAppeared):
            self._ensure_watches()
            if self.tracker.root_of(event.path, directory=True) is not None:
                # Files written into a new subdirectory before its inotify watch existed
                # are reported as created, never closed: they complete by settling.
                self._scan(event.path)
            event = Tick()
        assert not isinstance(event, Stop)
        self._hand_over(self.tracker.feed(event))

    def _hand_over(self, checkpoints: list[Checkpoint]) -> None:
        for cp in checkpoints:
            try:
                self.consumer.submit(cp)
            except Exception:
                self.stats.consumer_errors += 1
                log.exception("upload of checkpoint %s could not be queued", cp.name)
                continue
            self.stats.handed_over += 1
            log.info("checkpoint %s complete (%d files), handed to the uploader", cp.name, len(cp.files))

    def _add_root(self, root: str) -> None:
        """Watch `root` from now on. Its files older than the run belong to earlier runs; newer
        ones were written during the run before the watch existed: they complete by settling."""
        if self.tracker.root_of(root, directory=True) is not None:
            return
        self.roots.append(root)
        self.roots.sort(key=len, reverse=True)  # in place: RootWatches holds this list
        self.tracker.add_root(root)
        with self._watches_lock:
            if self._watches is not None:
                self._watches.add(root)
        log.info("watching %s: the training's log announced a checkpoint there", root)
        for path, st in self._existing_in(root):
            if st.mtime_ns < self._started_ns:
                self._initial[path] = st
            else:
                self._feed_own(FileFound(path))

    def _ensure_watches(self) -> bool:
        """Re-resolve the roots not watched themselves yet; False when there were none."""
        with self._watches_lock:
            if self._watches is None or not self._watches.pending:
                return False
            self._watches.ensure()
            return True

    def _existing(self) -> Iterable[tuple[str, FileStat]]:
        for root in self.roots:
            yield from self._existing_in(root)

    def _existing_in(self, root: str) -> Iterable[tuple[str, FileStat]]:
        for path in self._files_in(root):
            if self.tracker.recognizes(path):
                st = self._stat(path)
                if st is not None:
                    yield path, st

    def _files_in(self, root: str) -> Iterable[str]:
        """The files under `root`; a shallow root's own files only (never a walk of what is below)."""
        if root in self._shallow:
            try:
                with os.scandir(root) as entries:
                    yield from [e.path for e in entries if e.is_file(follow_symlinks=False)]
            except OSError:
                pass
            return
        for dirpath, _dirs, names in os.walk(root):
            for n in names:
                yield os.path.join(dirpath, n)

    def _finish(self) -> None:
        self.tracker.reconcile(self._existing(), self._initial)
        # Files still settling get their settle time (the training has ended by now): counted in
        # naps, not read from the clock, so a clock that never moves cannot hold the stop.
        for _ in range(int((self.settle + self.poll_interval) / self.poll_interval) + 1):
            if not self.tracker.settling:
                break
            self._sleep(self.poll_interval)
            self._hand_over(self.tracker.feed(Tick()))
        self._hand_over(self.tracker.finish())

    def _scan(self, root: str) -> None:
        """Files already in a directory that became watched late: complete by quiescence."""
        for path in self._files_in(root):
            self._feed_own(FileFound(path))
