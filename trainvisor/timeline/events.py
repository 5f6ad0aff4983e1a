"""The training's timeline: the events a user of a training loop knows, as frozen records.

One record type per kind (as watchdog has one per file event), so the keyword arguments a
callback's `on_<kind>` method may ask for are the fields of that record, known before the hook
ever fires (callbacks.py checks them at registration). Values are read-only mappings: a
callback on its own thread must not change what another one sees.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Mapping, Optional, Union

__all__ = [
    "TrainBegin",
    "BatchEnd",
    "EpochEnd",
    "TestEnd",
    "CheckpointReached",
    "TrainEnd",
    "TimelineEvent",
    "EVENT_TYPES",
    "frozen_values",
    "event_fields",
]

_NO_VALUES: Mapping[str, float] = MappingProxyType({})


def frozen_values(values: Mapping[str, float]) -> Mapping[str, float]:
    """A read-only copy, shared by every callback that receives it."""
    return MappingProxyType(dict(values))


@dataclass(frozen=True)
class TrainBegin:
    """The first child started (a restart into the same run is not a new begin)."""

    kind = "train_begin"
    run_id: str
    command: tuple[str, ...]
    wall_time: float


@dataclass(frozen=True)
class BatchEnd:
    """The train values logged at one iteration (`values` by metric name). `running` is True when
    they are a progress bar's running values inside an epoch, not the step's own."""

    kind = "batch_end"
    iteration: int
    epoch: Optional[float]
    values: Mapping[str, float]
    running: bool
    line: int
    stream: str
    rank: Optional[int]
    wall_time: float


@dataclass(frozen=True)
class TestEnd:
    """A validation or test pass complete, with all its outputs (`values` by metric name).
    `phase` is ``val`` or ``test``; `test_net` is Caffe's test net number (None elsewhere)."""

    kind = "test_end"
    phase: str
    test_net: Optional[int]
    epoch: Optional[float]
    iteration: Optional[int]
    values: Mapping[str, float]
    line: int
    stream: str
    rank: Optional[int]
    wall_time: float


@dataclass(frozen=True)
class EpochEnd:
    """An epoch's values complete. `epoch` is numbered as the log numbers it (Keras from 1,
    Lightning from 0); `values` by ``phase/name`` (``train/loss``, ``val/acc``): each the last
    completed (not running) value of that epoch. `iteration`: the last one seen in the epoch."""

    kind = "epoch_end"
    epoch: int
    iteration: Optional[int]
    values: Mapping[str, float]
    line: int
    stream: str
    rank: Optional[int]
    wall_time: float

    def phase(self, phase: str) -> dict[str, float]:
        """The values of one phase by metric name: ``event.phase("val")["acc"]``."""
        prefix = phase + "/"
        return {k[len(prefix):]: v for k, v in self.values.items() if k.startswith(prefix)}


@dataclass(frozen=True)
class CheckpointReached:
    """A checkpoint, at one of three moments (`state`): ``announced`` (the log said it was
    written: the only one a replay knows), ``complete`` (the watcher saw every file of the set
    closed) and ``verified`` (uploaded and checked in the store; `ok` False if that failed).
    `paths`: as the log printed them (announced) or absolute (complete, verified)."""

    kind = "checkpoint"
    state: str
    name: str
    paths: tuple[str, ...]
    iteration: Optional[int]
    epoch: Optional[float]
    wall_time: float
    ok: bool = True
    error: str = ""


@dataclass(frozen=True)
class TrainEnd:
    """The run ended: the last child's `exit_code` (None for a replay, which has no child), and
    `reason`: the stop reason when the run was stopped on request, else how it ended."""

    kind = "train_end"
    exit_code: Optional[int]
    reason: str
    stopped: bool
    wall_time: float


TimelineEvent = Union[TrainBegin, BatchEnd, TestEnd, EpochEnd, CheckpointReached, TrainEnd]

EVENT_TYPES: Mapping[str, type] = MappingProxyType(
    {t.kind: t for t in (TrainBegin, BatchEnd, EpochEnd, TestEnd, CheckpointReached, TrainEnd)})


def event_fields(kind: str) -> tuple[str, ...]:
    """The keyword arguments a hook for `kind` is called with: the record's fields and `event`."""
    return tuple(f.name for f in fields(EVENT_TYPES[kind])) + ("event",)
