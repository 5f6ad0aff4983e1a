"""What crosses into the watcher's thread: one frozen type per kind of evidence.

watchdog's dispatcher thread and the pipeline thread put these on the watcher's queue; the
watcher's own thread hands them to the pure `CheckpointTracker`. Paths are absolute and decoded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

__all__ = [
    "FileStat", "FileClosed", "FileChanged", "FileMoved", "FileDeleted", "FileFound", "Announced",
    "DirAppeared", "WatchRequested", "Tick", "Stop", "WatchEvent", "TrackerEvent",
]


@dataclass(frozen=True, slots=True)
class FileStat:
    """The version of a file the watcher compares: equal size and mtime mean unchanged.
    `ctime_ns` is not compared (a chmod is no new version); it tells how the file arrived."""

    size: int
    mtime_ns: int
    ctime_ns: int = field(default=0, compare=False)

    @property
    def changed_after_write(self) -> bool:
        """The inode changed after the last write: the file was renamed or moved into place
        (rename updates ctime, not mtime) or its times were restored after a copy. Every write
        sets mtime and ctime to the same time, so a file being written never looks like this."""
        return self.ctime_ns > self.mtime_ns


@dataclass(frozen=True)
class FileClosed:
    """Closed after writing (inotify only): the file is complete as it is."""

    path: str


@dataclass(frozen=True)
class FileChanged:
    """Created or modified: being written, complete only once proven (close, settle, log)."""

    path: str


@dataclass(frozen=True)
class FileMoved:
    """Renamed or moved to `dest`. `src` is None when it came from outside the watched tree
    (inotify's unmatched IN_MOVED_TO: a temporary file in /tmp moved into place). `by_rename`
    is False where the observer cannot tell a rename from a new file (polling)."""

    src: Optional[str]
    dest: str
    by_rename: bool = True


@dataclass(frozen=True)
class FileDeleted:
    """Deleted, or moved out of the watched tree."""

    path: str


@dataclass(frozen=True)
class FileFound:
    """Found by a scan of a directory that became watched late: complete once it settles."""

    path: str


@dataclass(frozen=True)
class Announced:
    """The training's log proves the file is completely written (thread: pipeline)."""

    path: str


@dataclass(frozen=True)
class DirAppeared:
    """A directory was created or moved in: the shell re-resolves watches and scans it."""

    path: str


@dataclass(frozen=True)
class WatchRequested:
    """The training's log announced a checkpoint in `path`, a directory no root covers: watch it
    from now on (thread: pipeline)."""

    path: str


@dataclass(frozen=True)
class Tick:
    """Time passed: settle and partial-set deadlines are checked."""


@dataclass(frozen=True)
class Stop:
    """Stop the watcher's thread; with `drain`, hand over what the run ended with first."""

    drain: bool = True


TrackerEvent = Union[FileClosed, FileChanged, FileMoved, FileDeleted, FileFound, Announced, Tick]
WatchEvent = Union[TrackerEvent, DirAppeared, WatchRequested, Stop]
