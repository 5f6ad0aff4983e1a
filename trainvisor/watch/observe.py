"""Filesystem observation: watchdog observers that only enqueue, and watches on
directories that may not exist yet.

watchdog calls handlers on its dispatcher thread under its lock, so `EnqueueHandler`
does nothing but put one typed event (`fsevents`) on the watcher's queue. A watched directory
that does not exist yet is covered by a non-recursive watch on its nearest
existing ancestor; each directory creation re-resolves, until the directory
itself is watched recursively. Only the inotify observer reports close-after-write.
The inotify observer reports unmatched moves too (`generate_full_events`): a file moved in
from outside the watched tree arrives as a move, complete at once, not as a new file.
"""
from __future__ import annotations

import logging
import os
import queue
import time
from typing import Callable, Optional

from watchdog.events import (
    DirCreatedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver, ObservedWatch

from .fsevents import DirAppeared, FileChanged, FileClosed, FileDeleted, FileMoved, WatchEvent

__all__ = ["EnqueueHandler", "RootWatches", "make_observer", "translate"]

log = logging.getLogger("trainvisor.watch")


def translate(event: FileSystemEvent, *, renames_are_proof: bool) -> Optional[WatchEvent]:
    """watchdog's event as ours, or None for what the watcher ignores (opens, attributes).
    `renames_are_proof` is False for the polling observer, which reports a new file in a
    deleted file's inode as a move."""
    src = os.fsdecode(event.src_path)
    if isinstance(event, FileClosedEvent):
        return FileClosed(src)
    if isinstance(event, (FileModifiedEvent, FileCreatedEvent)):
        return FileChanged(src)
    if isinstance(event, FileMovedEvent):
        dest = os.fsdecode(event.dest_path)
        if not dest:  # moved out of the watched tree
            return FileDeleted(src)
        return FileMoved(src or None, dest, by_rename=renames_are_proof)
    if isinstance(event, FileDeletedEvent):
        return FileDeleted(src)
    if isinstance(event, DirCreatedEvent):
        return DirAppeared(src)
    if isinstance(event, DirMovedEvent):
        dest = os.fsdecode(event.dest_path)
        return DirAppeared(dest) if dest else None
    return None


class EnqueueHandler(FileSystemEventHandler):
    """Runs on watchdog's thread: translate and enqueue, nothing else."""

    def __init__(self, q: "queue.SimpleQueue[WatchEvent]", *, renames_are_proof: bool = True) -> None:
        self._q = q
        self._renames_are_proof = renames_are_proof
        self.last_event = 0.0  # monotonic time of the last event (read by stop() to wait for quiet)

    def dispatch(self, event: FileSystemEvent) -> None:  # one translation, no per-kind methods
        self.last_event = time.monotonic()
        ours = translate(event, renames_are_proof=self._renames_are_proof)
        if ours is not None:
            self._q.put(ours)


def make_observer(*, poll: bool, poll_interval: float) -> BaseObserver:
    if poll:
        from watchdog.observers.polling import PollingObserver

        return PollingObserver(timeout=poll_interval)
    from watchdog.observers.inotify import InotifyObserver

    # Full events: a file moved in from outside the tree is an unmatched IN_MOVED_TO, which
    # the default reports as created (indistinguishable from a file just opened for writing).
    return InotifyObserver(generate_full_events=True)


def _nearest_existing(path: str) -> str:
    p = path
    while not os.path.isdir(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


class RootWatches:
    """Keeps each root watched: recursively once it exists (a `shallow` root: itself only),
    else through its nearest existing ancestor. `on_root_ready(root)` is called when a root that
    did not exist at start becomes watched (the caller scans it for files it may have missed)."""

    def __init__(self, roots: list[str], observer: BaseObserver, handler: EnqueueHandler,
                 on_root_ready: Callable[[str], None], *, shallow: frozenset = frozenset()) -> None:
        self._roots = roots
        self._shallow = shallow
        self._observer = observer
        self._handler = handler
        self._on_ready = on_root_ready
        self._watched: dict[str, tuple[str, bool]] = {}  # root -> (path, recursive) of its watch
        self._watches: dict[tuple[str, bool], tuple[ObservedWatch, int]] = {}

    @property
    def pending(self) -> bool:
        return any(self._watched.get(r, ("",))[0] != r for r in self._roots)

    def _schedule(self, path: str, recursive: bool) -> None:
        key = (path, recursive)
        if key in self._watches:
            w, n = self._watches[key]
            self._watches[key] = (w, n + 1)
            return
        w = self._observer.schedule(self._handler, path, recursive=recursive)
        self._watches[key] = (w, 1)

    def _unschedule(self, path: str, recursive: bool) -> None:
        key = (path, recursive)
        w, n = self._watches[key]
        if n > 1:
            self._watches[key] = (w, n - 1)
            return
        del self._watches[key]
        try:
            self._observer.unschedule(w)
        except (KeyError, OSError):
            pass  # the directory went away; its watch is gone with it

    def ensure(self, *, initial: bool = False) -> None:
        """(Re)resolve every root not yet watched itself. Cheap: stat calls only."""
        for root in self._roots:
            self._resolve(root, initial=initial)

    def add(self, root: str) -> None:
        """Watch one more root (the caller has put it in the roots list). Its files that exist
        now are the caller's to scan; if it does not exist yet it is scanned once it appears."""
        self._resolve(root, initial=True)

    def _resolve(self, root: str, *, initial: bool) -> None:
        current = self._watched.get(root)
        if current is not None and current[0] == root:
            return
        target = _nearest_existing(root)
        is_root = target == root
        watch = (target, is_root and root not in self._shallow)
        if current == watch:
            return
        try:
            self._schedule(*watch)
        except OSError as exc:
            log.warning("cannot watch %s: %s", target, exc)
            return
        if current is not None:
            self._unschedule(*current)
        self._watched[root] = watch
        if is_root and not initial:
            log.info("watching %s (created after start)", root)
            self._on_ready(root)
        elif not is_root and initial:
            log.info("%s does not exist yet; watching %s for its creation", root, target)
