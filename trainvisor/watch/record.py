"""Consumers that need no object store: a JSON Lines record of every checkpoint
handed over (RUN_DIR/checkpoints.jsonl), and a fan-out to several consumers."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Sequence

from ..checkpoints import checkpoint_to_dict
from ..events import Checkpoint
from .watcher import CheckpointConsumer

__all__ = ["CheckpointRecord", "FanOut"]

log = logging.getLogger("trainvisor.watch")


class CheckpointRecord:
    """Appends one line per hand-over: name, iteration, epoch, files with sizes.
    It records what was complete, not what was uploaded (the upload journal does that)."""

    def __init__(self, path: "str | os.PathLike[str]") -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()

    def submit(self, checkpoint: Checkpoint) -> None:
        rec = {"event": "checkpoint_complete", **checkpoint_to_dict(checkpoint), "wall_time": time.time()}
        for f in rec["files"]:
            try:
                f["size"] = os.path.getsize(f["path"])
            except OSError:
                f["size"] = None
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")


class FanOut:
    """Hands each checkpoint to every consumer; one failing does not stop the others."""

    def __init__(self, consumers: Sequence[CheckpointConsumer]) -> None:
        self.consumers = list(consumers)

    def submit(self, checkpoint: Checkpoint) -> None:
        errors = []
        for c in self.consumers:
            try:
                c.submit(checkpoint)
            except Exception as exc:  # counted by the watcher through the re-raise below
                log.exception("checkpoint consumer %r failed on %s", c, checkpoint.name)
                errors.append(exc)
        if errors:
            raise errors[0]
