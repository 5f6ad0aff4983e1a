"""Checkpoint watching: recognise checkpoint files, decide when a set is complete,
choose which to upload, and hand them to an uploader."""
from .caffe_solver import SolverSnapshot, snapshot_target
from .policy import UploadPolicy, parse_policy
from .recognizers import Part, Recognizer, default_recognizers, register_recognizer
from .tracker import CheckpointTracker, WatcherStats

__all__ = [
    "AnnouncementSink", "CheckpointConsumer", "CheckpointTracker", "CheckpointWatcher", "WatcherStats", "Part",
    "Recognizer",
    "default_recognizers", "register_recognizer", "UploadPolicy", "parse_policy", "SolverSnapshot",
    "snapshot_target",
]


def __getattr__(name: str):
    # The watcher pulls in watchdog; commands that never watch (parse, replay) skip it.
    if name in ("AnnouncementSink", "CheckpointConsumer", "CheckpointWatcher"):
        from . import watcher

        return getattr(watcher, name)
    raise AttributeError(f"module 'trainvisor.watch' has no attribute {name!r}")
