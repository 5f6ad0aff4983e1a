"""What the run and its sink host say to each other, one JSON object a line.

On the host's stdin: the start (`HostStart`, one line), then control lines: `{"outcome": [exit
code, stopped]}` (how the training ended, for MLflow's status) and `{"end": N}` (the run has
closed metrics.jsonl at N bytes: read to there, close the sinks, report; `"within": S`, the
seconds the run still waits: what is not written by then is counted as dropped). On its stdout: one line
`{"counts": [...]}`, each hosted sink's `SinkCounts`. On its stderr: each log record as one line
(`log_line`): the run logs it as its own, so a hosted sink's message reads as it would in the
run, and a traceback goes to the run log, not onto the training's stderr. Kept apart from the loop so both sides read
and write the same shape, and a test can read it."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, NamedTuple, Optional, Sequence

from ...defaults import SINK_BACKLOG, SINK_CPU_SHARE, SINK_QUEUE
from ..threaded import SinkCounts

__all__ = ["HostStart", "Control", "start_line", "read_start", "outcome_line", "end_line", "read_control",
           "counts_line", "read_counts", "LogLine", "log_line", "read_log"]


@dataclass(frozen=True)
class HostStart:
    """What the host needs: the file and where to start in it (a rerun appends: the offset is
    its length when this attempt began), each sink's name and options, the context fields a
    factory may ask for (`config`: the run's configuration as `config.convert.to_dict` shows it,
    secrets masked), `queue`: each sink's bound in records, `sinks.queue`, as in the run, and
    `cpu_share`: of one core, what the host takes while the training runs (`sinks.cpu_share`),
    `backlog`: the seconds of writing its sinks may hold together (`sinks.backlog`), `labels`:
    each sink's name in the run's counts, as the run labelled it (`csv#3` for a second csv)."""

    path: str
    offset: int
    sinks: tuple[tuple[str, Mapping[str, Any]], ...]
    run_id: str = ""
    run_dir: str = ""
    attempt: int = 0
    identity: Mapping[str, int] = field(default_factory=dict)
    config: Optional[Mapping[str, Any]] = None
    queue: int = SINK_QUEUE
    cpu_share: float = SINK_CPU_SHARE
    backlog: float = SINK_BACKLOG
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Control:
    """One control line read: an outcome, an end, or neither (a line the host does not know)."""

    outcome: Optional[tuple[int, bool]] = None
    end: Optional[int] = None
    within: Optional[float] = None


def start_line(start: HostStart) -> bytes:
    d = asdict(start)
    d["sinks"] = [[n, dict(o)] for n, o in start.sinks]
    return (json.dumps(d, default=str) + "\n").encode()


def read_start(line: bytes) -> HostStart:
    """ValueError for a line that is not a start."""
    d = json.loads(line)
    if not isinstance(d, dict) or not isinstance(d.get("path"), str):
        raise ValueError("the first line is not a sink host's start")
    d["sinks"] = tuple((str(n), o) for n, o in d.get("sinks", ()))
    d["labels"] = tuple(str(n) for n in d.get("labels", ()))
    return HostStart(**d)


def outcome_line(exit_code: int, stopped: bool) -> bytes:
    return (json.dumps({"outcome": [int(exit_code), bool(stopped)]}) + "\n").encode()


def end_line(length: int, within: float) -> bytes:
    return (json.dumps({"end": int(length), "within": float(within)}) + "\n").encode()


def read_control(line: bytes) -> Control:
    try:
        d = json.loads(line)
    except ValueError:
        return Control()
    if not isinstance(d, dict):
        return Control()
    outcome = d.get("outcome")
    end, within = d.get("end"), d.get("within")
    return Control(outcome=(int(outcome[0]), bool(outcome[1])) if isinstance(outcome, list) else None,
                   end=int(end) if isinstance(end, int) else None,
                   within=float(within) if isinstance(within, (int, float)) else None)


def counts_line(counts: Sequence[SinkCounts]) -> bytes:
    return (json.dumps({"counts": [asdict(c) for c in counts]}) + "\n").encode()


def read_counts(line: bytes) -> Optional[tuple[SinkCounts, ...]]:
    """The host's counts, or None for a line that is not its report."""
    try:
        d = json.loads(line)
        return tuple(SinkCounts(**c) for c in d["counts"])
    except (ValueError, KeyError, TypeError):
        return None


class LogLine(NamedTuple):
    """A host's log record, as the run re-logs it: its level, its message, its traceback's text."""

    level: int
    message: str
    traceback: Optional[str] = None


def log_line(level: int, message: str, traceback: Optional[str]) -> bytes:
    return (json.dumps({"log": [level, message, traceback]}) + "\n").encode()


def read_log(line: bytes) -> Optional[LogLine]:
    """A record `log_line` wrote, or None for a line that is not one (a library's own print, an
    interpreter's dying words)."""
    try:
        level, message, tb = json.loads(line)["log"]
        return LogLine(int(level), str(message), None if tb is None else str(tb))
    except (ValueError, KeyError, TypeError):
        return None
