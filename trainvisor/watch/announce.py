"""`AnnouncementSink`: the training's log as evidence that a checkpoint file is written."""
from __future__ import annotations

from typing import Protocol, Sequence

from ..events import CheckpointEvent, Event

__all__ = ["AnnouncementSink", "Announcer"]


class Announcer(Protocol):
    """What the sink tells (the watcher): `path` is completely written. Thread-safe."""

    def announce(self, path: str) -> None: ...


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

    def __init__(self, watcher: Announcer) -> None:
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
