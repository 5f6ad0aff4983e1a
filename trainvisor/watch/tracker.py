"""`CheckpointTracker`: the watcher's decisions, with no threads and no I/O but `stat`.

Events in (`fsevents`), checkpoints to hand over out. A file counts as complete when it was
closed after writing (inotify), renamed or moved into place (also from outside the watched
tree), unchanged in size and mtime for `settle` seconds (polling, or files found by a scan), or
proven written by the training's log. A set is handed over once all the files its recogniser
requires are complete; when a file of a set changes afterwards, the set is handed over again
with the new state. The upload policy decides which sets are handed over at all.

Time comes from the injected `clock` and file state from the injected `stat`, so tests drive
every rule with a table of events and a fake clock, without sleeping.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional, Sequence

from ..defaults import PARTIAL_AFTER, SETTLE
from ..events import Checkpoint, CheckpointFile
from .fsevents import (Announced, FileChanged, FileClosed, FileDeleted, FileFound, FileMoved, FileStat, Tick,
                       TrackerEvent)
from .policy import UploadPolicy
from .recognizers import Part, Recognizer, recognize

__all__ = ["CheckpointTracker", "WatcherStats", "stat_file", "StatFn"]

log = logging.getLogger("trainvisor.watch")

StatFn = Callable[[str], Optional[FileStat]]
SetKey = tuple[str, str, str]  # (directory, framework, set name): private to this module


def stat_file(path: str) -> Optional[FileStat]:
    """The production `stat`: None when the file is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return FileStat(st.st_size, st.st_mtime_ns, st.st_ctime_ns)


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
    complete: Optional[FileStat] = None
    last: Optional[FileStat] = None
    since: float = 0.0


@dataclass
class _Set:
    key: SetKey
    recognizer: Recognizer
    root: str
    roles: dict[str, str] = field(default_factory=dict)   # role -> path
    handed: Optional[tuple] = None                         # the file states last handed over
    selected: bool = False
    first_complete: Optional[float] = None


def _set_key(path: str, part: Part) -> SetKey:
    return (os.path.dirname(path), part.framework, part.set_name)


class CheckpointTracker:
    """Completion state of every checkpoint file under `roots` (absolute, longest first).

    `poll`: the observer cannot report close-after-write, so changed files complete by settling.
    `partial_after`: a set whose present files are all complete but which still lacks a required
    file is handed over as it is after this many seconds, and at `finish()`.
    `shallow`: roots (among `roots`) whose own files only are tracked, not their subdirectories'."""

    def __init__(self, roots: Sequence[str], recognizers: Sequence[Recognizer], *, poll: bool = False,
                 settle: float = SETTLE, policy: UploadPolicy = UploadPolicy(),
                 partial_after: float = PARTIAL_AFTER,
                 clock: Callable[[], float] = time.monotonic, stat: StatFn = stat_file,
                 shallow: Iterable[str] = ()) -> None:
        self.roots = sorted(roots, key=len, reverse=True)
        self.shallow = frozenset(shallow)
        self.recognizers = list(recognizers)
        self.poll, self.settle, self.policy, self.partial_after = poll, settle, policy, partial_after
        self.clock, self.stat = clock, stat
        self.stats = WatcherStats()
        self._files: dict[str, _File] = {}
        self._sets: dict[SetKey, _Set] = {}
        self._shared: dict[SetKey, str] = {}
        self._unsettled: set[str] = set()          # settle-tracked files not yet complete
        self._waiting: dict[SetKey, _Set] = {}      # sets complete but for missing files
        self._ordinal = 0
        self._out: list[Checkpoint] = []

    # -- public --------------------------------------------------------------------
    @property
    def settling(self) -> bool:
        """Files wait for quiescence: the caller should tick every poll interval."""
        return bool(self._unsettled)

    def feed(self, event: TrackerEvent) -> list[Checkpoint]:
        """Apply one event, then the time-based rules; the checkpoints to hand over now."""
        self._apply(event)
        now = self.clock()
        self._check_settled(now)
        self._check_partial(now)
        return self._take()

    def add_root(self, root: str) -> None:
        """Track files under `root` too (a directory the training's log announced a checkpoint in)."""
        if root not in self.roots:
            self.roots.append(root)
            self.roots.sort(key=len, reverse=True)

    def recognizes(self, path: str) -> bool:
        return recognize(path, self.recognizers) is not None

    def reconcile(self, existing: Iterable[tuple[str, FileStat]], initial: Mapping[str, FileStat]) -> None:
        """At the end, compare the directories (`existing`) with what the events told: a file the
        observer did not report complete (its last events can be lost when the observer stops)
        and that is not unchanged from before the run (`initial`) must settle."""
        for path, st in existing:
            f = self._files.get(path)
            if f is None and initial.get(path) == st:
                continue
            if f is not None and f.complete == st:
                continue
            f = f or self._track(path, settle=True)
            if f is not None and (f.complete is not None or path not in self._unsettled):
                f.settle = True
                self._writing(path, f, st)

    def finish(self) -> list[Checkpoint]:
        """The run ended: sets never handed over go as they are."""
        for s in list(self._sets.values()):
            if s.handed is None:
                self._try_hand_over(s, partial=True)
        return self._take()

    # -- events --------------------------------------------------------------------
    def _take(self) -> list[Checkpoint]:
        out, self._out = self._out, []
        return out

    def _apply(self, event: TrackerEvent) -> None:
        if isinstance(event, Tick):
            return
        if isinstance(event, FileMoved):
            self._on_moved(event)
        elif isinstance(event, FileDeleted):
            self._forget(event.path)
        elif isinstance(event, Announced):
            self._on_announced(os.path.normpath(event.path))
        elif isinstance(event, FileFound):
            f = self._track(event.path, settle=True)
            if f is not None and f.complete is None:
                f.settle = True
                self._writing(event.path, f)
        elif isinstance(event, FileClosed):
            f = self._track(event.path, settle=self.poll)
            if f is not None:
                self._completed(f, event.path, self.stat(event.path), "close")
        elif isinstance(event, FileChanged):
            self._on_changed(event.path)

    def _on_changed(self, path: str) -> None:
        f = self._track(path, settle=self.poll)
        if f is None:
            return
        st = self.stat(path)
        if f.settle and f.complete is not None and st == f.complete:
            return  # polling saw the state we already accepted
        if self.poll and st is not None and st.changed_after_write:
            # The polling observer reports a file moved in as created: its ctime (the move)
            # after its mtime (the last write) says it is already complete.
            self._completed(f, path, st, "rename")
            return
        self._writing(path, f, st)

    def _on_moved(self, event: FileMoved) -> None:
        if event.src is not None:
            self._forget(event.src)
        f = self._track(event.dest, settle=not event.by_rename)
        if f is None:
            return
        st = self.stat(event.dest)
        if event.by_rename or (st is not None and st.changed_after_write):
            # Written elsewhere (often outside the watched tree), then moved into place:
            # a rename is atomic, so the file is complete the moment it appears.
            self._completed(f, event.dest, st, "rename")
        else:
            # The polling observer also reports "deleted A, created B in A's inode"
            # as a move: not evidence of a rename after writing (B's ctime is its last
            # write, not later), so B must settle.
            self._writing(event.dest, f, st)

    def _on_announced(self, path: str) -> None:
        f = self._track(path, settle=self.poll)
        st = self.stat(path)
        if f is not None and st is not None:
            self._completed(f, path, st, "log")

    def _writing(self, path: str, f: _File, st: Optional[FileStat] = None) -> None:
        """`path` is (again) being written: not complete until proven."""
        f.complete = None
        f.last = st if st is not None else self.stat(path)
        f.since = self.clock()
        if f.settle:
            self._unsettled.add(path)

    def root_of(self, path: str, *, directory: bool = False) -> Optional[str]:
        """The root whose files include `path` (a file; with `directory`, a directory whose files
        the root covers), or None."""
        for root in self.roots:  # longest first
            if path == root or path.startswith(root + os.sep):
                if root in self.shallow and (path != root if directory else os.path.dirname(path) != root):
                    continue  # below a shallow root: not its own file
                return root
        return None

    def _track(self, path: str, *, settle: bool) -> Optional[_File]:
        f = self._files.get(path)
        if f is not None:
            return f
        root = self.root_of(path)
        found = recognize(path, self.recognizers) if root is not None else None
        if found is None or root is None:
            return None
        rec, part = found
        f = self._files[path] = _File(root, rec, part, settle, since=self.clock())
        if not part.shared:
            key = _set_key(path, part)
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
        key = _set_key(path, f.part)
        if f.part.shared:
            self._shared.pop(key, None)
            return
        s = self._sets.get(key)
        if s is not None and s.roles.get(f.part.role) == path:
            del s.roles[f.part.role]
            if not s.roles:
                del self._sets[key]
                self._waiting.pop(key, None)

    # -- completion ----------------------------------------------------------------
    def _check_settled(self, now: float) -> None:
        for path in list(self._unsettled):
            f = self._files[path]
            st = self.stat(path)
            if st is None:
                continue
            if st != f.last:
                f.last, f.since = st, now
            elif now - f.since >= self.settle:
                self._completed(f, path, st, "settle")

    def _completed(self, f: _File, path: str, st: Optional[FileStat], how: str) -> None:
        if st is None:
            return
        self.stats.completed_by[how] = self.stats.completed_by.get(how, 0) + 1
        f.complete = f.last = st
        self._unsettled.discard(path)
        key = _set_key(path, f.part)
        if f.part.shared:
            self._shared[key] = path
            return
        s = self._sets.get(key)
        if s is not None:
            self._try_hand_over(s, partial=False)

    def _check_partial(self, now: float) -> None:
        for s in list(self._waiting.values()):
            if s.handed is None and s.first_complete is not None and now - s.first_complete >= self.partial_after:
                self._try_hand_over(s, partial=True)

    def _ready(self, s: _Set, partial: bool) -> Optional[list[str]]:
        """The paths to hand over, or None while the set is not ready."""
        present_complete = all(self._files[p].complete is not None for p in s.roles.values() if p in self._files)
        if not present_complete or not s.roles:
            return None
        required = s.recognizer.required_roles(frozenset(s.roles))
        if required is None or not required <= s.roles.keys():
            if s.first_complete is None:
                s.first_complete = self.clock()
            if not partial:
                if s.handed is None:
                    self._waiting[s.key] = s
                return None
        paths = [s.roles[r] for r in sorted(s.roles)]
        shared = self._shared_for(s)
        return paths + [shared] if shared else paths

    def _try_hand_over(self, s: _Set, *, partial: bool) -> None:
        paths = self._ready(s, partial)
        if paths is None:
            return
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
            required = s.recognizer.required_roles(frozenset(s.roles)) or set()
            log.warning("checkpoint %s is incomplete (missing %s); handing over what exists",
                        cp.name, ", ".join(sorted(required - s.roles.keys())) or "files")
        self._out.append(cp)

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
