"""TensorBoard sink: the run's metrics as scalar event files that TensorBoard reads.

The event files are written by tensorboardX (a maintained writer, never a hand-made record
format), through `tb_events.EventFile`: only its record writer and protocol buffers are imported
(the package's `__init__` would load torch), on the sink's own thread at its first write, so a run
that names the sink starts as fast as one that does not; only the package's presence is checked
before the child starts. The values of one step read in one batch go into one event (a Caffe
iteration's loss, lr and speed): a third of the records, the same scalars.

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
from typing import Any, Callable, Optional, Sequence

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
            raise ConfigError("needs the tensorboardX package: pip install 'trainvisor[tensorboard]'")
        self.dir = os.fspath(dir)
        os.makedirs(self.dir, exist_ok=True)  # an unwritable dir is the user's to fix, before the child starts
        self._scalars = ScalarNamer(self._add, rank_wait=rank_wait, rank_wait_seconds=rank_wait_seconds,
                                    clock=clock)
        self._writer: Any = None  # a tb_events.EventFile, opened at the first value
        self._step: Optional[tuple[int, float]] = None  # the (step, wall time) of the values in _values
        self._values: list[tuple[str, float]] = []  # one event's scalars, not yet written
        self._closed = False

    def write(self, events: Sequence[object]) -> None:
        add = self._scalars.add
        for m in events:
            if type(m) is Metric:
                add(m)
        self._write_event()

    def flush(self) -> None:
        self._scalars.tick()
        self._write_event()
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._scalars.release()
        self._write_event()
        if self._writer is not None:
            self._writer.close()

    def _add(self, tag: str, step: int, m: Metric) -> None:
        # Scalars built here, not by SummaryWriter.add_scalar: that one goes through numpy and
        # logs a warning for each NaN, thousands of lines into the run log for a diverged loss.
        key = (step, m.wall_time)
        if key != self._step or any(t == tag for t, _ in self._values):
            self._write_event()
            self._step = key
        self._values.append((tag, float(m.value)))

    def _write_event(self) -> None:
        """The scalars gathered for one (step, wall time), as one event."""
        if not self._values:
            return
        if self._writer is None:  # here, on the sink's thread: see the module's docstring
            from .tb_events import EventFile

            self._writer = EventFile(self.dir)
        step, wall_time = self._step  # type: ignore[misc]
        values, self._values = self._values, []
        self._writer.scalars(step, wall_time, values)
