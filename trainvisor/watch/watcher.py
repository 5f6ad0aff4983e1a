"""`CheckpointWatcher`: turns filesystem events and log announcements into complete
checkpoint sets and hands them to a consumer (the upload manager).

A file counts as complete when it was closed after writing (inotify), renamed into
place, unchanged in size and mtime for `settle` seconds (polling, or files found by
a scan), or proven written by the training's log. A set is handed over once all
the files its recogniser requires are complete; when a file of a set changes
afterwards, the set is handed over again with the new state. All of this runs on
the watcher's own thread: watchdog's thread and the pipeline thread only enqueue.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional, Protocol, Sequence, runtime_checkable

from ..events import Checkpoint, CheckpointEvent, CheckpointFile, Event
from watchdog.observers.api import BaseObserver

from .observe import EnqueueHandler, RootWatches, make_observer
from .policy import UploadPolicy
from .recognizers import Part, Recognizer, default_recognizers, recognize

__all__ = ["CheckpointConsumer", "CheckpointWatcher", "AnnouncementSink", "WatcherStats"]

log = logging.getLogger("trainvisor.watch")

Stat = tuple[int, int]  # (size, mtime_ns)


@runtime_checkable
class CheckpointConsumer(Protocol):
    """What the watcher hands checkpoints to. `submit` must not block for long
    (the upload manager queues and uploads on its own threads)."""

    def submit(self, checkpoint: Checkpoint) -> None: ...


@dataclass
class WatcherStats:
    handed_over: int = 0
    skipped_by_policy: int = 0
    partial: int = 0
    consumer_errors: int = 0
    completed_by: dict[str, int] = field(default_factory=dict)   # "close"/"rename"/"settle"/"log" -> files

    def summary(self) -> str:
        how = ", ".join(f"{k} {v}" for k, v in sorted(self.completed_by.items())) or "none"
        return (f"{self.handed_over} checkpoints handed over, {self.skipped_by_policy} skipped by policy, "
                f"{self.partial} partial, {self.consumer_errors} consumer errors; files complete by: {how}")


@dataclass
class _File:
    root: str
    recognizer: Recognizer
    part: Part
    settle: bool                    # complete by quiescence (polling, or found by a scan)
    complete: Optional[Stat] = None
    last: Optional[Stat] = None
    since: float = 0.0


@dataclass
class _Set:
    key: tuple
    recognizer: Recognizer
    root: str
    roles: dict[str, str] = field(default_factory=dict)   # role -> path
    handed: Optional[tuple] = None
    selected: bool = False
    first_complete: Optional[float] = None


def _stat(path: str) -> Optional[Stat]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


class CheckpointWatcher:
    """Watch `dirs` for checkpoints and hand complete ones to `consumer`.

    `partial_after`: a set whose present files are all complete but which still
    lacks a required file (a Caffe weights file whose solverstate never comes) is
    handed over as it is after this many seconds, and at `stop()`.
    `include_existing`: also hand over checkpoints already in the directories at
    start (default no: they belong to an earlier run)."""

    def __init__(self, dirs: Iterable[str], *, consumer: CheckpointConsumer,
                 recognizers: Optional[Sequence[Recognizer]] = None, poll: bool = False,
                 settle: float = 2.0, policy: UploadPolicy = UploadPolicy(),
                 partial_after: float = 120.0, include_existing: bool = False,
                 clock: Callable[[], float] = time.monotonic, poll_interval: Optional[float] = None,
                 cwd: Optional[str] = None, observer_factory: Optional[Callable[[], BaseObserver]] = None) -> None:
        self.roots = sorted({os.path.abspath(os.path.join(cwd or os.getcwd(), d)) for d in dirs},
                            key=len, reverse=True)
        self.consumer = consumer
        self.recognizers = list(recognizers) if recognizers is not None else default_recognizers()
        self.poll = poll
        self.settle = settle
        self.policy = policy
        self.partial_after = partial_after
        self.include_existing = include_existing
        self.clock = clock
        self.cwd = cwd or os.getcwd()
        self._observer_factory = observer_factory or (
            lambda: make_observer(poll=self.poll, poll_interval=self.poll_interval))
        self.poll_interval = poll_interval if poll_interval is not None else max(0.05, min(1.0, settle / 4))
        self.stats = WatcherStats()
        self._q: "queue.SimpleQueue" = queue.SimpleQueue()
        self._files: dict[str, _File] = {}
        self._sets: dict[tuple, _Set] = {}
        self._shared: dict[tuple, str] = {}
        self._unsettled: set[str] = set()        # settle-tracked files not yet complete
        self._waiting: dict[tuple, _Set] = {}     # sets complete but for missing files
        self._ordinal = 0
        self._deferred: Optional[Checkpoint] = None
        self._observer = None
        self._thread: Optional[threading.Thread] = None
        self._initial: dict[str, Stat] = {}
        self._watches: Optional[RootWatches] = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> "CheckpointWatcher":
        if self._thread is not None:
            return self
        self._observer = self._observer_factory()
        self._handler = EnqueueHandler(self._q)
        self._watches = RootWatches(self.roots, self._observer, self._handler, self._scan)
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

    def stop(self, *, drain: bool = True, timeout: float = 10.0) -> None:
        """Stop watching. With `drain`, first process what is queued, hand over the
        sets the run ended with (partial ones, the `last` policy's checkpoint)."""
        if self._thread is None:
            return
        if drain:
            # Let the observer deliver what the last writes caused before it stops:
            # until it has been quiet for a moment (inotify delivers in well under 1 ms).
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline and time.monotonic() - self._handler.last_event < 0.1:
                time.sleep(0.02)
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout)
        self._q.put(("stop", drain))
        self._thread.join(timeout + (self.settle if drain else 0.0))
        self._thread = None
        log.info("checkpoint watcher stopped: %s", self.stats.summary())

    def __enter__(self) -> "CheckpointWatcher":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop(drain=exc[0] is None)

    def announcement_sink(self) -> "AnnouncementSink":
        """A pipeline sink that feeds the parser's CheckpointEvents to this watcher."""
        return AnnouncementSink(self)

    def announce(self, path: str) -> None:
        """Evidence from the log that `path` is completely written (thread-safe)."""
        self._q.put(("log", os.path.join(self.cwd, path), None))

    # -- worker --------------------------------------------------------------------
    def _loop(self) -> None:
        last_ensure = self.clock()
        while True:
            wait = self.poll_interval if self._settling() else 0.5
            try:
                item = self._q.get(timeout=wait)
            except queue.Empty:
                item = None
            try:
                if item is not None and item[0] == "stop":
                    self._drain_queue()
                    if item[1]:
                        self._finish()
                    return
                if item is not None:
                    self._handle(item)
                now = self.clock()
                self._check_settled(now)
                if self._watches.pending and now - last_ensure >= 0.5:
                    last_ensure = now
                    self._watches.ensure()
                self._check_partial(now)
            except Exception:  # the watcher must keep going; one bad event is logged, not fatal
                log.exception("checkpoint watcher: error handling %r", item)

    def _drain_queue(self) -> None:
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return
            if item[0] != "stop":
                try:
                    self._handle(item)
                except Exception:
                    log.exception("checkpoint watcher: error handling %r", item)

    def _handle(self, item: tuple) -> None:
        source, kind, path = item[0], item[1], item[2]
        if source == "log":
            self._on_log(kind)
            return
        if kind == "dir":
            if self._watches.pending:
                self._watches.ensure()
            if self._root_of(path) is not None:
                # Files written into a new subdirectory before its inotify watch existed
                # are reported as created, never closed: they complete by settling.
                self._scan(path)
            return
        if kind == "moved":
            self._forget(path)
            dest = item[3]
            f = self._track(dest, settle=self.poll)
            if f is None:
                return
            if self.poll:
                # The polling observer also reports "deleted A, created B in A's inode"
                # as a move: not evidence of a rename after writing, so B must settle.
                self._writing(dest, f)
            else:
                self._completed(f, dest, _stat(dest), "rename")
            return
        if kind == "deleted":
            self._forget(path)
            return
        f = self._track(path, settle=self.poll)
        if f is None:
            return
        if kind == "closed":
            self._completed(f, path, _stat(path), "close")
        else:  # created / modified: being written
            st = _stat(path)
            if f.settle and f.complete is not None and st == f.complete:
                return  # polling saw the state we already accepted
            self._writing(path, f, st)

    def _writing(self, path: str, f: _File, st: Optional[Stat] = None) -> None:
        """`path` is (again) being written: not complete until proven."""
        f.complete = None
        f.last = st if st is not None else _stat(path)
        f.since = self.clock()
        if f.settle:
            self._unsettled.add(path)

    def _root_of(self, path: str) -> Optional[str]:
        for root in self.roots:  # longest first
            if path == root or path.startswith(root + os.sep):
                return root
        return None

    def _track(self, path: str, *, settle: bool) -> Optional[_File]:
        f = self._files.get(path)
        if f is not None:
            return f
        root = self._root_of(path)
        if root is None:
            return None
        found = recognize(path, self.recognizers)
        if found is None:
            return None
        rec, part = found
        f = _File(root, rec, part, settle, since=self.clock())
        self._files[path] = f
        if not part.shared:
            key = (os.path.dirname(path), part.framework, part.set_name)
            s = self._sets.get(key)
            if s is None:
                s = self._sets[key] = _Set(key, rec, root)
            s.roles[part.role] = path
        return f

    def _forget(self, path: str) -> None:
        self._unsettled.discard(path)
        f = self._files.pop(path, None)
        if f is None:
            return
        if f.part.shared:
            self._shared.pop((os.path.dirname(path), f.part.framework, f.part.set_name), None)
            return
        key = (os.path.dirname(path), f.part.framework, f.part.set_name)
        s = self._sets.get(key)
        if s is not None and s.roles.get(f.part.role) == path:
            del s.roles[f.part.role]
            if not s.roles:
                del self._sets[key]
                self._waiting.pop(key, None)

    def _on_log(self, path: str) -> None:
        path = os.path.normpath(path)
        f = self._track(path, settle=self.poll)
        st = _stat(path)
        if f is not None and st is not None:
            self._completed(f, path, st, "log")

    def _settling(self) -> bool:
        return bool(self._unsettled)

    def _check_settled(self, now: float) -> None:
        for path in list(self._unsettled):
            f = self._files[path]
            st = _stat(path)
            if st is None:
                continue
            if st != f.last:
                f.last, f.since = st, now
            elif now - f.since >= self.settle:
                self._completed(f, path, st, "settle")

    def _completed(self, f: _File, path: str, st: Optional[Stat], how: str) -> None:
        if st is None:
            return
        self.stats.completed_by[how] = self.stats.completed_by.get(how, 0) + 1
        f.complete = f.last = st
        self._unsettled.discard(path)
        if f.part.shared:
            self._shared[(os.path.dirname(path), f.part.framework, f.part.set_name)] = path
            return
        key = (os.path.dirname(path), f.part.framework, f.part.set_name)
        s = self._sets.get(key)
        if s is not None:
            self._try_hand_over(s, partial=False)

    def _set_state(self, s: _Set) -> tuple[Optional[frozenset], bool]:
        """(required roles or None, whether every present file is complete)."""
        present_complete = all(self._files[p].complete is not None for p in s.roles.values() if p in self._files)
        return s.recognizer.required_roles(frozenset(s.roles)), present_complete

    def _try_hand_over(self, s: _Set, *, partial: bool) -> None:
        required, present_complete = self._set_state(s)
        if not present_complete or not s.roles:
            return
        if required is None or not required <= s.roles.keys():
            if s.first_complete is None:
                s.first_complete = self.clock()
            if not partial:
                if s.handed is None:
                    self._waiting[s.key] = s
                return
        paths = [s.roles[r] for r in sorted(s.roles)]
        shared = self._shared_for(s)
        if shared:
            paths.append(shared)
        signature = tuple((p, self._files[p].complete) for p in paths)
        self._waiting.pop(s.key, None)
        if signature == s.handed:
            return
        cp = self._checkpoint(s, paths)
        if not s.selected and s.handed is None:
            self._ordinal += 1
            if not self.policy.selects(cp, self._ordinal):
                s.handed = signature
                self.stats.skipped_by_policy += 1
                log.info("checkpoint %s not uploaded (policy %s)", cp.name, self.policy.kind)
                return
            s.selected = True
        elif not s.selected:
            return  # skipped by the policy earlier
        s.handed = signature
        if partial:
            self.stats.partial += 1
            log.warning("checkpoint %s is incomplete (missing %s); handing over what exists",
                        cp.name, ", ".join(sorted((required or set()) - s.roles.keys())) or "files")
        if self.policy.defers:
            self._deferred = cp
            return
        self._submit(cp)

    def _shared_for(self, s: _Set) -> Optional[str]:
        d, fw, name = s.key
        for (sd, sfw, prefix), path in self._shared.items():
            if sd == d and sfw == fw and name.startswith(prefix + "-"):
                return path
        return None

    def _checkpoint(self, s: _Set, paths: list[str]) -> Checkpoint:
        parts = [self._files[p].part for p in paths]
        iteration = next((p.iteration for p in parts if p.iteration is not None), None)
        epoch = next((p.epoch for p in parts if p.epoch is not None), None)
        cp = Checkpoint(
            name=s.key[2], files=tuple(CheckpointFile(p, os.path.relpath(p, s.root)) for p in paths),
            iteration=iteration, epoch=epoch, root=s.root, framework=s.recognizer.name)
        if epoch is None and self.policy.epoch_of(cp) is not None:
            cp = Checkpoint(cp.name, cp.files, cp.iteration, self.policy.epoch_of(cp), cp.root, cp.framework)
        return cp

    def _submit(self, cp: Checkpoint) -> None:
        try:
            self.consumer.submit(cp)
        except Exception:
            self.stats.consumer_errors += 1
            log.exception("upload of checkpoint %s could not be queued", cp.name)
            return
        self.stats.handed_over += 1
        log.info("checkpoint %s complete (%d files), handed to the uploader", cp.name, len(cp.files))

    def _check_partial(self, now: float) -> None:
        for s in list(self._waiting.values()):
            if s.handed is None and now - s.first_complete >= self.partial_after:
                self._try_hand_over(s, partial=True)

    def _existing(self) -> Iterable[tuple[str, Stat]]:
        for root in self.roots:
            for dirpath, _dirs, names in os.walk(root):
                for n in names:
                    path = os.path.join(dirpath, n)
                    if recognize(path, self.recognizers) is not None:
                        st = _stat(path)
                        if st is not None:
                            yield path, st

    def _reconcile(self) -> None:
        """At the end, compare the directories with what the events told: a file the
        observer did not report complete (its last events can be lost when the
        observer stops) and that is not unchanged from before the run must settle."""
        for path, st in self._existing():
            f = self._files.get(path)
            if f is None and self._initial.get(path) == st:
                continue
            if f is not None and f.complete == st:
                continue
            f = f or self._track(path, settle=True)
            if f is not None and (f.complete is not None or path not in self._unsettled):
                f.settle = True
                self._writing(path, f, st)

    def _finish(self) -> None:
        self._reconcile()
        # Files still settling get their settle time (the training has ended by now).
        deadline = time.monotonic() + self.settle + self.poll_interval
        while self._settling() and time.monotonic() < deadline:
            time.sleep(self.poll_interval)
            self._check_settled(self.clock())
        for s in list(self._sets.values()):
            if s.handed is None:
                self._try_hand_over(s, partial=True)
        if self._deferred is not None:
            cp, self._deferred = self._deferred, None
            self._submit(cp)

    def _scan(self, root: str) -> None:
        """Files already in a directory that became watched late: complete by quiescence."""
        for dirpath, _dirs, names in os.walk(root):
            for n in names:
                path = os.path.join(dirpath, n)
                f = self._track(path, settle=True)
                if f is not None and f.complete is None:
                    f.settle = True
                    self._writing(path, f)


class AnnouncementSink:
    """A pipeline sink: the parser's CheckpointEvents as completion evidence.

    What each announcement proves: Caffe prints `Snapshotting to binary proto file
    X.caffemodel` BEFORE writing X (proves nothing yet), then `Snapshotting solver
    state to ... Y.solverstate` after X is fully written (proves X), then writes Y;
    the next event the log yields after that proves Y. A kind we do not know as
    "before" (MXNet's `Saved checkpoint to "P"`, kind ``params``) is printed after
    the save and proves its file at once."""

    name = "checkpoint-watch"
    _BEFORE = {"weights"}

    def __init__(self, watcher: CheckpointWatcher) -> None:
        self._w = watcher
        self._announced: list[str] = []   # written or being written, not yet proven

    def write(self, events: Sequence[Event]) -> None:
        for ev in events:
            if self._announced:
                # any later event proves every earlier announced file was written
                for p in self._announced:
                    self._w.announce(p)
                self._announced = []
            if isinstance(ev, CheckpointEvent):
                if ev.kind in self._BEFORE or ev.kind == "solverstate":
                    self._announced.append(ev.path)
                else:
                    self._w.announce(ev.path)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        # The log ended: a file announced last may have been cut short by a kill; no proof.
        self._announced = []
