"""The records that flow through trainvisor: lines in, metrics and checkpoints out.

`LineRecord` and `Metric` are created once per line / per metric on the hot path,
so they are NamedTuples (immutable, ~6x cheaper to build than a frozen dataclass);
rarer events are frozen dataclasses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional, Union

__all__ = [
    "LineRecord",
    "Metric",
    "CheckpointEvent",
    "Event",
    "CheckpointFile",
    "Checkpoint",
    "PHASE_TRAIN",
    "PHASE_TEST",
    "PHASE_VAL",
]

PHASE_TRAIN = "train"
PHASE_TEST = "test"
PHASE_VAL = "val"


def json_safe(v):
    """A float JSON can carry: NaN and infinities become the strings repr() gives."""
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    return v


class LineRecord(NamedTuple):
    """One line of the child's output, as a line hook sees it.

    `text` is decoded (UTF-8, invalid bytes replaced), without its line ending and
    without ANSI escape sequences; a `\\r`-rewritten line holds its final state.
    `number` is 1-based per stream, counted like `wc -l`, so it points into a
    saved log. `time` is `time.monotonic()` when the bytes were read.
    """

    text: str
    stream: str
    number: int
    time: float
    truncated: bool = False


class Metric(NamedTuple):
    """One parsed value. Identical for a live run and a replay of the same bytes,
    except `wall_time` (when trainvisor saw the line)."""

    name: str
    value: float
    iteration: Optional[int]
    phase: str
    test_net: Optional[int]
    seconds: Optional[float]
    epoch: Optional[float]
    wall_time: float
    line: int

    def to_json_dict(self) -> dict:
        """JSON has no NaN/Infinity: those are written as strings so the
        record stays valid JSON and the event is not lost."""
        d = self._asdict()
        for key in ("value", "seconds", "epoch", "wall_time"):
            d[key] = json_safe(d[key])
        return d

    @classmethod
    def from_json_dict(cls, d: dict) -> "Metric":
        """Keys that are not fields (a run's `attempt`) are run metadata, not part of the metric."""
        fields = {k: d[k] for k in cls._fields}
        fields["value"] = float(d["value"])
        return cls(**fields)

    def without_wall_time(self) -> tuple:
        """The fields that must agree between `run` and `replay` of the same bytes."""
        return self._replace(wall_time=0.0)


@dataclass(frozen=True)
class CheckpointEvent:
    """The training announced (or wrote) a checkpoint file.

    `path` is as the log printed it (relative to the child's working directory
    when not absolute). `kind` says which file of a checkpoint set it is
    (e.g. ``weights`` / ``solverstate`` for Caffe).
    """

    path: str
    kind: str
    iteration: Optional[int]
    epoch: Optional[float]
    line: int
    wall_time: float

    def to_json_dict(self) -> dict:
        return {
            "event": "checkpoint",
            "path": self.path,
            "kind": self.kind,
            "iteration": self.iteration,
            "epoch": json_safe(self.epoch),
            "line": self.line,
            "wall_time": json_safe(self.wall_time),
        }


Event = Union[Metric, CheckpointEvent]


@dataclass(frozen=True)
class CheckpointFile:
    """One file of a checkpoint: `path` is absolute, `relpath` is relative to the
    watched root and becomes the tail of the object key."""

    path: str
    relpath: str


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint, ready to upload as one set.

    The watcher builds it once every file is complete (closed after writing,
    renamed into place, or quiet for the settle time). `name` identifies the
    set (e.g. ``lenet_iter_500``), `framework` says which recogniser matched.
    """

    name: str
    files: tuple[CheckpointFile, ...]
    iteration: Optional[int]
    epoch: Optional[float]
    root: str
    framework: str = ""
