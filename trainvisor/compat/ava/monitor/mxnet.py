"""MXNet's in-process callbacks, without importing MXNet: `batch_end_callback_builder` gives
the callbacks `Module.fit(batch_end_callback=...)` calls with a `BatchEndParam` (epoch, nbatch,
eval_metric, locals), `epoch_end_callback_builder` the one `fit(epoch_end_callback=...)` calls
with `(epoch, symbol, arg_params, aux_params)`. Only the attributes are read, so any object of
that shape works (MXNet is neither needed at import nor checked for).

Every `frequent` batches the eval metric's values go to the sinks as `Metric`s (phase "train",
iteration = batches so far, epoch counted from 0 as MXNet does), with the speed as
`samples_per_sec` once a previous report gives an interval, as Speedometer logged it.
"""
from __future__ import annotations

import logging
import math
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from ....events import Metric
from .reporting import MetricReporter

if TYPE_CHECKING:
    from ..train.base import TrainInstance

__all__ = ["BatchEndMonitor", "batch_end_callback_builder", "epoch_end_callback_builder", "checkpoint_files"]

log = logging.getLogger("trainvisor.compat.ava")


class BatchEndMonitor:
    """The batch-end callback: reports every `frequent`-th batch; never raises into `fit`."""

    def __init__(self, reporter: MetricReporter, batch_size: int, frequent: int, *,
                 batches_per_epoch: Optional[int] = None, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.reporter = reporter
        self.batch_size, self.frequent = int(batch_size), max(1, int(frequent))
        self.batches_per_epoch = batches_per_epoch
        self._clock, self._wall = clock, wall_clock
        self._last: Optional[tuple[int, int, float]] = None  # (epoch, nbatch, time) of the last report
        self._total = 0  # batches seen, over epochs (nbatch starts again at each epoch)
        self._count = 0

    def __call__(self, param: Any) -> None:
        try:
            self._report(param)
        except Exception:
            log.exception("the MXNet batch-end monitor failed")

    def _report(self, param: Any) -> None:
        epoch, nbatch = int(param.epoch), int(param.nbatch)
        if self.batches_per_epoch:
            self._total = epoch * self.batches_per_epoch + nbatch
        else:
            self._total += 1
        if nbatch % self.frequent != 0:
            return
        now, wall = self._clock(), self._wall()
        pairs = list(param.eval_metric.get_name_value()) if getattr(param, "eval_metric", None) is not None else []
        if self._last is not None and self._last[0] == epoch and nbatch > self._last[1] and now > self._last[2]:
            speed = (nbatch - self._last[1]) * self.batch_size / (now - self._last[2])
            pairs.append(("samples_per_sec", speed))
            log.info("Epoch[%d] Batch [%d]\tSpeed: %.2f samples/sec", epoch, nbatch, speed)
        self._last = (epoch, nbatch, now)
        records = []
        for name, value in pairs:
            self._count += 1
            records.append(Metric(name=str(name), value=float(value), iteration=self._total, phase="train",
                                  test_net=None, seconds=None, epoch=float(epoch), wall_time=wall,
                                  line=self._count, stream="callback"))
        self.reporter.records([m for m in records if not math.isnan(m.value)] if records else [])


def batch_end_callback_builder(actual_batch_size: int, frequent: int, training_ins_id: Optional[str] = None, *,
                               instance: Optional["TrainInstance"] = None,
                               batches_per_epoch: Optional[int] = None) -> list:
    """AVA's list of batch-end callbacks (here one: the monitor), reporting to `instance`'s run
    folder (a TrainInstance for `training_ins_id` is made when none is given)."""
    if instance is None:
        from ..train.base import TrainInstance

        instance = TrainInstance(training_ins_id, log_to_file=False)
    return [BatchEndMonitor(instance.reporter(), actual_batch_size, frequent, batches_per_epoch=batches_per_epoch)]


def epoch_end_callback_builder(training_ins: "TrainInstance", batch_of_epoch: int, other_files: Sequence[str] = (),
                               epoch_interval: int = 1) -> Callable[..., None]:
    """The epoch-end callback: every `epoch_interval` epochs, the checkpoint that
    `mx.callback.do_checkpoint` (listed before it) has just written in the snapshot folder is
    uploaded as that epoch's set; the whole folder when no file has do_checkpoint's names (as AVA)."""
    interval = max(1, int(epoch_interval))

    def callback(iter_no: int, sym: Any = None, arg: Any = None, aux: Any = None) -> None:
        if (iter_no + 1) % interval:
            return
        try:
            files = checkpoint_files(training_ins.get_snapshot_base_path(), iter_no + 1)
            err = training_ins.upload_snapshot_model(iter_no + 1, batch_of_epoch, list(other_files),
                                                     files=files or None)
        except Exception as exc:  # never into fit()
            err = exc
        if err is not None:
            log.warning("upload of the snapshot of epoch %d failed: %s", iter_no + 1, err)

    return callback


def checkpoint_files(folder: str, epoch: int) -> list[str]:
    """`mx.model.save_checkpoint`'s files of `epoch` in `folder`: `PREFIX-symbol.json` and
    `PREFIX-%04d.params` (and `.states`, the optimizer's), not the other epochs' still waiting
    for their upload."""
    suffixes = ("-symbol.json", f"-{epoch:04d}.params", f"-{epoch:04d}.states")
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(suffixes))
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names]
