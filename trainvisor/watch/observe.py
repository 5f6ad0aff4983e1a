"""Filesystem observation: watchdog observers that only enqueue, and watches on
directories that may not exist yet.

watchdog calls handlers on its dispatcher thread under its lock, so `_Enqueue`
does nothing but put a small tuple on the watcher's queue. A watched directory
that does not exist yet is covered by a non-recursive watch on its nearest
existing ancestor; each directory creation re-resolves, until the directory
itself is watched recursively. Only the inotify observer reports close-after-write.
"""
from __future__ import annotations

import logging
import os
import queue
import time
from typing import Callable

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

__all__ = ["FsItem", "EnqueueHandler", "RootWatches", "make_observer"]

log = logging.getLogger("trainvisor.watch")

# (kind, path, dest): kind is one of "created", "modified", "closed", "moved", "deleted", "dir"
FsItem = tuple


class EnqueueHandler(FileSystemEventHandler):
    """Runs on watchdog's thread: translate and enqueue, nothing else."""

    def __init__(self, q: "queue.SimpleQueue") -> None:
        self._q = q
        self.last_event = 0.0  # monotonic time of the last event (read by stop() to wait for quiet)

    def dispatch(self, event: FileSystemEvent) -> None:  # one isinstance chain, no per-kind methods
        self.last_event = time.monotonic()
        src = os.fsdecode(event.src_path)
        if isinstance(event, FileClosedEvent):
            self._q.put(("fs", "closed", src, None))
        elif isinstance(event, FileModifiedEvent):
            self._q.put(("fs", "modified", src, None))
        elif isinstance(event, FileCreatedEvent):
            self._q.put(("fs", "created", src, None))
        elif isinstance(event, FileMovedEvent):
            self._q.put(("fs", "moved", src, os.fsdecode(event.dest_path)))
        elif isinstance(event, FileDeletedEvent):
            self._q.put(("fs", "deleted", src, None))
        elif isinstance(event, DirCreatedEvent):
            self._q.put(("fs", "dir", src, None))
        elif isinstance(event, DirMovedEvent):
            self._q.put(("fs", "dir", os.fsdecode(event.dest_path), None))


def make_observer(*, poll: bool, poll_interval: float) -> BaseObserver:
    if poll:
        from watchdog.observers.polling import PollingObserver

        return PollingObserver(timeout=poll_interval)
    from watchdog.observers.inotify import InotifyObserver

    return InotifyObserver()


def _nearest_existing(path: str) -> str:
    p = path
    while not os.path.isdir(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


class RootWatches:
    """Keeps each root watched: recursively once it exists, else through its nearest
    existing ancestor. `on_root_ready(root)` is called when a root that did not
    exist at start becomes watched (the caller scans it for files it may have missed)."""

    def __init__(self, roots: list[str], observer: BaseObserver, handler: EnqueueHandler,
                 on_root_ready: Callable[[str], None]) -> None:
        self._roots = roots
        self._observer = observer
        self._handler = handler
        self._on_ready = on_root_ready
        self._watched: dict[str, tuple[str, bool]] = {}
        self._watches: dict[tuple[str, bool], tuple[ObservedWatch, int]] = {}

    @property
    def pending(self) -> bool:
        return any(self._watched.get(r, ("", False))[1] is False for r in self._roots)

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
            current = self._watched.get(root)
            if current is not None and current[1]:
                continue
            target = _nearest_existing(root)
            is_root = target == root
            if current is not None and current == (target, is_root):
                continue
            try:
                self._schedule(target, is_root)
            except OSError as exc:
                log.warning("cannot watch %s: %s", target, exc)
                continue
            if current is not None:
                self._unschedule(*current)
            self._watched[root] = (target, is_root)
            if is_root and not initial:
                log.info("watching %s (created after start)", root)
                self._on_ready(root)
            elif not is_root and initial:
                log.info("%s does not exist yet; watching %s for its creation", root, target)
