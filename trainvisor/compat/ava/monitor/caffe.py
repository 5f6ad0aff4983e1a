"""Caffe's monitors as line hooks (for `cmd.logproc`, or `Run(hooks=[...])`): the log callback
parses each line with trainvisor's Caffe parser and reports through the sinks; the epoch-end
callback uploads the snapshot of the epoch that ended (epoch = ceil(iteration / batch_of_epoch)).

Caffe prints "Snapshotting solver state to FILE" before it writes FILE, so the set is submitted
when the next line arrives (Caffe writes in the thread that logs: the file is whole by then) or
when the log ends (`finish`, which `cmd.logproc` calls at the end of the output).
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time
from typing import TYPE_CHECKING, Optional, Sequence

from .reporting import Line, MetricReporter, block_of, text_of

if TYPE_CHECKING:
    from ..train.base import TrainInstance

__all__ = ["CaffeMonitor", "EpochEndCallback", "get_log_callback", "get_epoch_end_log_callback", "epoch_of"]

log = logging.getLogger("trainvisor.compat.ava")


def epoch_of(iteration: int, batch_of_epoch: int) -> int:
    """The epoch a snapshot at `iteration` ends (AVA rounded up: iteration 1000 of 1000 a
    epoch is epoch 1, iteration 1001 epoch 2)."""
    return max(1, math.ceil(iteration / batch_of_epoch))


class CaffeMonitor:
    """A line hook: each line to the reporter's parser and sinks. Never raises into the training."""

    def __init__(self, reporter: MetricReporter) -> None:
        self.reporter = reporter
        self.name = "ava caffe monitor"

    def __call__(self, line: Line) -> None:
        try:
            self.reporter.feed(line)
        except Exception:  # a failing monitor must not stop the training's log loop
            log.exception("the Caffe monitor failed on a line")

    def finish(self) -> None:
        self.reporter.flush()

    def close(self) -> None:
        self.reporter.close()


class EpochEndCallback:
    """A line hook that finds Caffe's snapshots and hands each epoch's to the training instance."""

    def __init__(self, training_ins: "TrainInstance", batch_of_epoch: int, other_files: Sequence[str] = ()) -> None:
        from ....parsers import ParserOptions
        from ....parsers.select import build_parser

        self.name = "ava epoch-end callback"
        self._ins, self._per_epoch, self._other = training_ins, int(batch_of_epoch), tuple(other_files)
        self._parser = build_parser("caffe", ParserOptions(year=time.localtime().tm_year))
        self._lock = threading.Lock()
        self._line = 0
        self._pending: Optional[tuple[str, int]] = None  # the announced solver state: (path, iteration)

    def __call__(self, line: Line) -> None:
        text = text_of(line)
        with self._lock:
            self._submit_pending()
            if "Snapshotting" not in text:  # the cheap check before the parser
                return
            self._line += 1
            for ev in self._parser.feed(block_of(text, self._line, time.time())) or ():
                if getattr(ev, "kind", None) == "solverstate" and ev.iteration is not None:
                    self._pending = (ev.path, ev.iteration)

    def finish(self) -> None:
        """The log ended: the last announced snapshot is written; submit it."""
        with self._lock:
            self._submit_pending()

    def _submit_pending(self) -> None:
        if self._pending is None:
            return
        path, iteration = self._pending
        self._pending = None
        epoch = epoch_of(iteration, self._per_epoch)
        err = self._ins.upload_snapshot_model(epoch, self._per_epoch, list(self._other),
                                              files=snapshot_files(path, iteration))
        if err is not None:
            log.warning("upload of the snapshot of epoch %d failed: %s", epoch, err)


def snapshot_files(solverstate: str, iteration: int) -> list[str]:
    """The files of the snapshot whose solver state is `solverstate`: every file beside it whose
    name starts with the same `<prefix>_iter_<N>.` (the weights, the state; .h5 variants)."""
    folder = os.path.dirname(os.path.abspath(solverstate))
    stem = os.path.basename(solverstate).split(f"_iter_{iteration}.")[0] + f"_iter_{iteration}."
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith(stem))
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names]


def get_log_callback(training_ins_id: Optional[str] = None, *, reporter: Optional[MetricReporter] = None,
                     instance: Optional["TrainInstance"] = None) -> CaffeMonitor:
    """The monitor hook; its records go to `instance`'s run folder (a TrainInstance made here
    when none is given, from AVA_WORKSPACE and `training_ins_id`)."""
    if reporter is None:
        if instance is None:
            from ..train.base import TrainInstance

            instance = TrainInstance(training_ins_id, log_to_file=False)
        reporter = instance.reporter()
    return CaffeMonitor(reporter)


def get_epoch_end_log_callback(training_ins: "TrainInstance", batch_of_epoch: Optional[int] = None,
                               other_files: Sequence[str] = ()) -> Optional[EpochEndCallback]:
    """None (and a warning, as in AVA) without `batch_of_epoch`."""
    if not batch_of_epoch or int(batch_of_epoch) <= 0:
        log.warning("no epoch-end callback: batch_of_epoch must be a positive number, got %r", batch_of_epoch)
        return None
    return EpochEndCallback(training_ins, batch_of_epoch, other_files)
