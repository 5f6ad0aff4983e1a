"""Checkpoint watching: recognise checkpoint files, decide when a set is complete,
choose which to upload, and hand them to an uploader.

Names load on first use: the watcher pulls in watchdog, and the tracker and recognisers compile
patterns; a run that watches nothing (and `parse`, `replay`) pays for none of them."""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SolverSnapshot": "caffe_solver", "snapshot_target": "caffe_solver",
    "UploadPolicy": "policy", "parse_policy": "policy",
    "Part": "recognizers", "Recognizer": "recognizers", "default_recognizers": "recognizers",
    "register_recognizer": "recognizers",
    "CheckpointTracker": "tracker", "WatcherStats": "tracker",
    "AnnouncementSink": "watcher", "CheckpointConsumer": "watcher", "CheckpointWatcher": "watcher",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trainvisor.watch' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
