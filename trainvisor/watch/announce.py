"""`AnnouncementSink`: the training's log as evidence that a checkpoint is written, and as the
news of where checkpoints are written (the watcher starts watching there)."""
from __future__ import annotations

from typing import Protocol, Sequence

from ..events import CheckpointEvent, Event, Notice

__all__ = ["AnnouncementSink", "Announcer", "BEFORE_KINDS", "DIRECTORY_KINDS"]

# Kinds printed BEFORE their file is written (checked in each framework's source): the line
# proves nothing yet; the next event of the log proves the save ended (these saves are
# synchronous). Caffe: ``Snapshotting to binary proto file`` (weights), then the solverstate;
# darknet ``Saving weights to`` (weights); fvcore/detectron2 ``Saving checkpoint to`` and
# mmcv/mmengine ``Saving checkpoint at`` (pth); TensorFlow ``Saving checkpoints for N into``
# and Lightning ``saving model to '...ckpt'`` (ckpt); Keras ModelCheckpoint (keras); the
# Hugging Face Trainer's ``Saving model checkpoint to`` (trainer).
# Any other kind is printed after the save and proves its file at once: MXNet's ``Saved
# checkpoint to`` (params), YOLO's ``Optimizer stripped from`` (stripped).
BEFORE_KINDS = frozenset({"weights", "solverstate", "pth", "ckpt", "keras", "trainer"})
# Kinds whose path is a directory: its files are the checkpoint.
DIRECTORY_KINDS = frozenset({"trainer"})


class Announcer(Protocol):
    """What the sink tells (the watcher). Thread-safe."""

    def announce(self, path: str) -> None:
        """`path` (a file, or a directory whose files all) is completely written."""
        ...

    def watch_announced(self, path: str, *, directory: bool = False) -> None:
        """A checkpoint is (being) written at `path`: watch where it is."""
        ...


class AnnouncementSink:
    """A pipeline sink: the parser's CheckpointEvents as completion evidence.

    Each announcement first has its directory watched (so a run uploads what its log announces
    without `--watch`). Then what it proves: an announcement of a `BEFORE_KINDS` kind proves
    its file only once the log yields a later event (for Caffe, the solverstate line proves the
    weights); any other kind proves its file at once. A directory checkpoint is proven as a
    whole: every file in it."""

    name = "checkpoint-watch"

    def __init__(self, watcher: Announcer) -> None:
        self._w = watcher
        self._announced: list[str] = []   # written or being written, not yet proven

    def write(self, events: Sequence[Event]) -> None:
        for ev in events:
            if self._announced and type(ev) is not Notice:
                # any later event proves every earlier announced file was written (a Notice is
                # about the output, possibly said at its end: no proof that the training moved on)
                for p in self._announced:
                    self._w.announce(p)
                self._announced = []
            if isinstance(ev, CheckpointEvent):
                self._w.watch_announced(ev.path, directory=ev.kind in DIRECTORY_KINDS)
                if ev.kind in BEFORE_KINDS:
                    self._announced.append(ev.path)
                else:
                    self._w.announce(ev.path)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        # The log ended: a file announced last may have been cut short by a kill; no proof.
        self._announced = []
