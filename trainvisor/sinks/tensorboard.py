"""TensorBoard sink: the run's metrics as scalar event files that TensorBoard reads.

The event files are written by tensorboardX (a maintained writer, never a hand-made record
format). Importing it costs about a second (it loads torch when torch is installed), so the sink
imports it on its own thread, at its first write: a run that names the sink starts as fast as
one that does not, and only the package's presence is checked before the child starts.

The naming is `sinks/scalars.py`'s, shared with the MLflow sink and documented in README's
"Sinks" section (`PHASE/NAME` tags, step = iteration or epoch, ranks, running values). NaN and
infinities are written as they are: TensorBoard shows them, and a loss that diverged is what a
reader of the curve must see, not a gap.

TensorBoard stores a scalar as a 32-bit float: a value reads back as its nearest float32.
"""
from __future__ import annotations

import importlib.util
import os
import time
from typing import Any, Callable, Sequence

from ..errors import ConfigError
from ..events import Metric
from .scalars import DEFAULT_RANK_WAIT, DEFAULT_RANK_WAIT_SECONDS, ScalarNamer, scalar_step, scalar_tag

__all__ = ["TensorBoardSink", "scalar_tag", "scalar_step"]


class TensorBoardSink:
    """Writes every Metric it is given as one scalar; other events are not scalars and are
    skipped. Not thread-safe: the registry runs it on a thread of its own (not inline)."""

    name = "tensorboard"

    def __init__(self, dir: str, *, rank_wait: int = DEFAULT_RANK_WAIT,
                 rank_wait_seconds: float = DEFAULT_RANK_WAIT_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if importlib.util.find_spec("tensorboardX") is None:
            raise ConfigError("sink 'tensorboard' needs the tensorboardX package: pip install tensorboardX")
        self.dir = os.fspath(dir)
        os.makedirs(self.dir, exist_ok=True)  # an unwritable dir is the user's to fix, before the child starts
        self._scalars = ScalarNamer(self._add, rank_wait=rank_wait, rank_wait_seconds=rank_wait_seconds,
                                    clock=clock)
        self._writer: Any = None
        self._summary: Any = None  # tensorboardX's Summary message class, with the writer
        self._closed = False

    def write(self, events: Sequence[object]) -> None:
        for m in events:
            if type(m) is Metric:
                self._scalars.add(m)

    def flush(self) -> None:
        self._scalars.tick()
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._scalars.release()
        if self._writer is not None:
            self._writer.close()

    def _add(self, tag: str, step: int, m: Metric) -> None:
        writer = self._open()
        # the Summary built here, not by SummaryWriter.add_scalar: that one goes through numpy and
        # logs a warning for each NaN, thousands of lines into the run log for a diverged loss
        value = self._summary.Value(tag=tag, simple_value=float(m.value))
        writer.add_summary(self._summary(value=[value]), step, m.wall_time)

    def _open(self) -> Any:
        if self._writer is None:
            # here, on the sink's thread: see the module's docstring
            from tensorboardX import FileWriter
            from tensorboardX.proto.summary_pb2 import Summary

            # flush_secs: the pipeline flushes the sinks at least once a second; the writer's own
            # timer only matters for a sink that stopped being flushed
            self._writer = FileWriter(self.dir, flush_secs=30)
            self._summary = Summary
        return self._writer
