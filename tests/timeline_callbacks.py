"""Callbacks the tests load by `module:Class` (`--callback`, `callbacks.use`), as a user's would be."""
from __future__ import annotations

import json

from trainvisor import Callback


class EventLog(Callback):
    """Writes one JSON line per epoch_end, test_end and train_end to `path` (its option)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _write(self, record: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    def on_epoch_end(self, epoch, values):
        self._write({"kind": "epoch_end", "epoch": epoch, "values": dict(values)})

    def on_test_end(self, iteration, test_net, values):
        self._write({"kind": "test_end", "iteration": iteration, "test_net": test_net, "values": dict(values)})

    def on_train_end(self, exit_code, reason, stopped):
        self._write({"kind": "train_end", "exit_code": exit_code, "reason": reason, "stopped": stopped})


class Misspelled(Callback):
    def on_epoch_ends(self, epoch):
        pass
