"""The records that flow through trainvisor: lines in, metrics and checkpoints out.

`LineRecord` and `Metric` are created once per line / per metric on the hot path,
so they are NamedTuples (immutable, ~6x cheaper to build than a frozen dataclass);
rarer events are frozen dataclasses.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterator, NamedTuple, Optional, Union

from ._frozen import frozen

__all__ = [
    "LineBlock",
    "LineRecord",
    "Metric",
    "CheckpointEvent",
    "Notice",
    "Event",
    "with_stream",
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
    without ANSI escape sequences; a line rewritten with `\\r` / `\\b` holds its final
    state, the row a terminal shows last. `states`: for a rewritten line, the states a
    reader could have seen, in order (the last is `text`; the oldest states of a line
    longer than the splitter's budget went to the parsers earlier and are not repeated
    here); empty for a line never rewritten.
    `number` is 1-based per stream, counted like `wc -l`, so it points into a
    saved log. `time` is `time.monotonic()` when the bytes were read.
    """

    text: str
    stream: str
    number: int
    time: float
    truncated: bool = False
    states: tuple = ()


class LineBlock(NamedTuple):
    """Lines of one stream, each ending with ``\\n``, numbered from `first_line`.

    `count` lines are complete. When `open_line` is True one more text line follows
    them: early states of line ``first_line + count``, still open (it is counted, and
    its last states come, in a later block with that `first_line`).
    """

    text: str
    stream: str
    first_line: int
    count: int
    time: float
    wall_time: float
    truncated: tuple = ()
    open_line: bool = False

    def records(self) -> Iterator[LineRecord]:
        """One `LineRecord` per complete line, for line hooks (built only when a hook wants them)."""
        lines = self.text.split("\n", self.count)
        number = self.first_line
        stream, t, cut = self.stream, self.time, self.truncated
        for text in lines[: self.count]:
            if "\r" in text:
                states = tuple(text.split("\r"))
                yield LineRecord(states[-1], stream, number, t, number in cut, states)
            else:
                yield LineRecord(text, stream, number, t, number in cut if cut else False)
            number += 1


class Metric(NamedTuple):
    """One parsed value. Identical for a live run and a replay of the same bytes,
    except `wall_time` (when trainvisor saw the line) and `stream` (a replay reads
    one log file: its records say ``log``).

    `line` is counted per `stream` (``stdout``, ``stderr``, ``log``), so the pair
    points into what the child wrote. `rank`: the distributed rank whose output
    held the line, when a launcher prefixed it (``[rank1]:``); None otherwise.
    `running`: True for a running value inside an epoch (a progress bar's live
    postfix, a Keras step line), False for a value of a completed step or epoch;
    a consumer plotting epoch curves keeps the False ones.
    """

    name: str
    value: float
    iteration: Optional[int]
    phase: str
    test_net: Optional[int]
    seconds: Optional[float]
    epoch: Optional[float]
    wall_time: float
    line: int
    stream: str = "stdout"
    rank: Optional[int] = None
    running: bool = False

    def to_json_dict(self) -> dict:
        """JSON has no NaN/Infinity: those are written as strings so the
        record stays valid JSON and the event is not lost. `rank` is written
        only when known and `running` only when True (most records have neither)."""
        d = self._asdict()
        for key in ("value", "seconds", "epoch", "wall_time"):
            d[key] = json_safe(d[key])
        if d["rank"] is None:
            del d["rank"]
        if not d["running"]:
            del d["running"]
        return d

    @classmethod
    def from_json_dict(cls, d: dict) -> "Metric":
        """Keys that are not fields (a run's `attempt`) are run metadata, not part of the metric;
        fields a record leaves out (`rank`, `running`, files of older versions) take their defaults."""
        fields = {k: d[k] for k in cls._fields if k in d}
        fields["value"] = float(d["value"])
        return cls(**fields)

    def without_wall_time(self) -> tuple:
        """The fields that must agree between `run` and `replay` of the same bytes."""
        return self._replace(wall_time=0.0, stream="")


@frozen
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
    stream: str = "stdout"

    def to_json_dict(self) -> dict:
        return {
            "event": "checkpoint",
            "path": self.path,
            "kind": self.kind,
            "iteration": self.iteration,
            "epoch": json_safe(self.epoch),
            "line": self.line,
            "wall_time": json_safe(self.wall_time),
            "stream": self.stream,
        }


@frozen
class Notice:
    """Something the reader of a run must be told, once: the output lacks what a parser
    expected (a Rich bar that printed only its last epoch's values), so fewer records than the
    training logged is said, with its remedy, instead of passed over in silence.

    `code` is stable (tests and the summary group by it); `message` is one line that names
    the remedy. A parser emits a given `code` at most once per run."""

    code: str
    message: str
    line: int
    wall_time: float
    stream: str = "stdout"

    def to_json_dict(self) -> dict:
        return {
            "event": "notice",
            "code": self.code,
            "message": self.message,
            "line": self.line,
            "wall_time": json_safe(self.wall_time),
            "stream": self.stream,
        }


Event = Union[Metric, CheckpointEvent, Notice]

_new_tuple = tuple.__new__


def with_stream(events: list[Event], stream: str) -> list[Event]:
    """`events` with `stream` set where a parser left another (parsers read text and
    need not know the stream; the pipeline knows the block's). Events already on
    `stream` are kept as they are, so a parser that sets it costs one comparison."""
    out = []
    for ev in events:
        if ev.stream != stream:
            if type(ev) is Metric:
                ev = _new_tuple(Metric, ev[:9] + (stream,) + ev[10:])
            else:
                ev = replace(ev, stream=stream)
        out.append(ev)
    return out


@frozen
class CheckpointFile:
    """One file of a checkpoint: `path` is absolute, `relpath` is relative to the
    watched root and becomes the tail of the object key."""

    path: str
    relpath: str


@frozen
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

    def __post_init__(self) -> None:
        # One type for the epoch wherever it is written (a name gives 3, a journal read back 3.0):
        # a manifest or checkpoints.jsonl record then reads the same whoever wrote it.
        if self.epoch is not None and type(self.epoch) is not float:
            object.__setattr__(self, "epoch", float(self.epoch))
