"""What `trainvisor plot` reads: a run directory, a metrics.jsonl, or a training log.

A run directory's metrics are its `metrics.jsonl`, every attempt in it (each record says which
start wrote it). A file is a metrics.jsonl when its first line is a metric record as
`JsonlSink` writes it; anything else is a training log, parsed first by `trainvisor.replay`
(the engine a live run uses) with the parsing options given, so `plot LOG` draws what
`trainvisor run` would have recorded from the same bytes.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import ConfigError
from ..events import Metric
from .series import Point

__all__ = ["Loaded", "load_points", "METRICS_NAME"]

METRICS_NAME = "metrics.jsonl"
_SNIFF_BYTES = 65536
_FLOAT_FIELDS = ("value", "seconds", "epoch", "wall_time")


@dataclass(frozen=True)
class Loaded:
    """The metrics of one source: `kind` is ``run``, ``jsonl`` or ``log``; `path` the file read."""

    kind: str
    path: str
    points: tuple[Point, ...]


def load_points(source: "str | os.PathLike[str]", *, parsing: Mapping[str, Any]) -> Loaded:
    """The metrics of `source`; `parsing`: `trainvisor.replay`'s options, for a log.
    ConfigError (one line) for a source that does not exist or cannot be read."""
    path = os.fspath(source)
    if os.path.isdir(path):
        jsonl = os.path.join(path, METRICS_NAME)
        if not os.path.isfile(jsonl):
            raise ConfigError(f"{path} has no {METRICS_NAME}: not a run directory, or its run wrote "
                              f"metrics elsewhere (--metrics): plot that file")
        return Loaded("run", jsonl, _read_jsonl(jsonl))
    if _is_metrics_jsonl(path):
        return Loaded("jsonl", path, _read_jsonl(path))
    from ..calls.logs import replay

    done = replay(path, **parsing, keep_events=True)
    return Loaded("log", path, tuple(Point(m) for m in done.metrics))


def _is_metrics_jsonl(path: str) -> bool:
    """Whether the file's first non-blank line is a metric record (name, value, phase)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    for line in head.splitlines():
        if line.strip():
            try:
                record = json.loads(line)
            except ValueError:
                return False
            return isinstance(record, dict) and {"name", "value", "phase"} <= record.keys()
    return False


def _read_jsonl(path: str) -> tuple[Point, ...]:
    """Metric records with their attempt; checkpoint and notice records skipped. A last line cut
    short (a run killed while writing) is left out; any other bad line is an error naming it."""
    points = []
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    last = len(lines) - 1
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if "event" in record:
                continue
            points.append(Point(_metric(record), record.get("attempt")))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            if number - 1 == last:  # no newline after it: the writer stopped mid-record
                break
            raise ConfigError(f"{path}:{number}: not a metric record ({exc})") from exc
    return tuple(points)


def _metric(record: dict) -> Metric:
    """A record as `JsonlSink` wrote it; NaN and infinities come back from their strings."""
    fixed = dict(record)
    for key in _FLOAT_FIELDS:
        if isinstance(fixed.get(key), str):
            fixed[key] = float(fixed[key])
    return Metric.from_json_dict(fixed)
