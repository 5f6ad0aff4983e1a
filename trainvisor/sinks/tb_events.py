"""The TensorBoard sink's adapter over tensorboardX: an event file, written one `Event` at a time.

Why not `tensorboardX.FileWriter`: importing the package runs its `__init__`, which imports
`SummaryWriter` and with it torch (measured here: 2.7 s and ~400 MB in the supervising process,
whose job is to be small) although scalar events need only three of its modules: the protocol
buffers (`proto.event_pb2`, `proto.summary_pb2`) and the record writer (`event_file_writer.
EventsWriter`, which frames and checksums each record, the TFRecord format TensorBoard reads).
So those three are imported with the package's `__init__` left out: a bare package module stands
in for `tensorboardX` while they load, and is removed after (a later `import tensorboardX` by
anyone runs the real `__init__`, reusing the loaded submodules). When tensorboardX is already
imported, it is used as it is.

Why `EventsWriter` and not `EventFileWriter`: the latter hands each event to a thread through a
`multiprocessing.Queue` (a pickle and a pipe per event); the sink already has its own thread.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from typing import Any, Sequence

__all__ = ["EventFile"]


def _modules() -> tuple[Any, Any, Any]:
    """(event_file_writer, event_pb2, summary_pb2) of tensorboardX, without its `__init__`."""
    names = ("tensorboardX.event_file_writer", "tensorboardX.proto.event_pb2", "tensorboardX.proto.summary_pb2")
    if "tensorboardX" in sys.modules:
        return tuple(importlib.import_module(n) for n in names)  # type: ignore[return-value]
    spec = importlib.util.find_spec("tensorboardX")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("tensorboardX is not installed: pip install tensorboardX")
    bare = types.ModuleType("tensorboardX")
    bare.__path__ = list(spec.submodule_search_locations)  # type: ignore[attr-defined]
    bare.__spec__, bare.__file__ = spec, spec.origin
    sys.modules["tensorboardX"] = bare
    try:
        return tuple(importlib.import_module(n) for n in names)  # type: ignore[return-value]
    finally:
        if sys.modules.get("tensorboardX") is bare:
            del sys.modules["tensorboardX"]


class EventFile:
    """One event file in `logdir` (`events.out.tfevents.TIME.HOST`, created now). Not
    thread-safe beyond what `EventsWriter` locks: one sink thread writes it."""

    def __init__(self, logdir: str) -> None:
        writer_mod, event_pb2, summary_pb2 = _modules()
        os.makedirs(logdir, exist_ok=True)
        self._writer = writer_mod.EventsWriter(os.path.join(logdir, "events"))
        self._event, self._summary = event_pb2.Event, summary_pb2.Summary

    def scalars(self, step: int, wall_time: float, values: Sequence[tuple[str, float]]) -> None:
        """One event holding the scalar `values` ((tag, value), each tag once) at `step`."""
        summary = self._summary(value=[self._summary.Value(tag=t, simple_value=v) for t, v in values])
        self._writer.write_event(self._event(wall_time=wall_time, step=step, summary=summary))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
