"""Checkpoint watching: recognise checkpoint files, decide when a set is complete,
choose which to upload, and hand them to an uploader."""
from .caffe_solver import SolverSnapshot, snapshot_target
from .policy import UploadPolicy, parse_policy
from .recognizers import Part, Recognizer, default_recognizers, register_recognizer
from .watcher import AnnouncementSink, CheckpointConsumer, CheckpointWatcher, WatcherStats

__all__ = [
    "AnnouncementSink", "CheckpointConsumer", "CheckpointWatcher", "WatcherStats", "Part", "Recognizer",
    "default_recognizers", "register_recognizer", "UploadPolicy", "parse_policy", "SolverSnapshot",
    "snapshot_target",
]
