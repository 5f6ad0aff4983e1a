"""`summary.json`: a finished run's `RunSummary`, kept in its run directory and read back whole.

Why a file: `trainvisor run` prints its summary for a person, but a program that started it (a
test's `supervised_run`, a platform's post-step, a notebook) wants the fields, typed. The file
is written when the run finishes (temporary file + rename, so a reader never sees half of it)
and `read_summary(run_dir)` gives the same `RunSummary` back (NaN and infinities kept, as
metrics.jsonl keeps them). A damaged or missing file is a one-line ConfigError, never a partial
summary read as a whole one.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError
from ..events import Metric, Notice
from .summary import FaultCount, RunSummary, UploadTotals

__all__ = ["SUMMARY_NAME", "write_summary", "read_summary"]

SUMMARY_NAME = "summary.json"


def _plain(value: Any) -> Any:
    """JSON's form of a summary value: records as objects, tuples as lists, NaN as "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _number(v: Any) -> Any:
    return float(v) if isinstance(v, str) and v in ("nan", "inf", "-inf") else v


def _record(cls: type) -> Callable[[dict], Any]:
    """A decoder of one record type: its fields by name, numbers as JSON kept them."""
    def decode(d: dict) -> Any:
        return cls(**{k: _number(v) if not isinstance(v, list) else tuple(v) for k, v in d.items()})
    return decode


def _decoders() -> dict[str, Callable[[Any], Any]]:
    from ..sinks.lastbest import MetricRow
    from ..sinks.threaded import SinkCounts
    from ..stoprules import Firing
    from ..stream.tail import TailStats

    def many(decode: Callable[[dict], Any]) -> Callable[[list], tuple]:
        return lambda items: tuple(decode(d) for d in items)

    def optional(decode: Callable[[dict], Any]) -> Callable[[Any], Any]:
        return lambda d: None if d is None else decode(d)

    return {
        "command": tuple, "warnings": tuple, "abandoned": tuple, "restarts": tuple,
        "faults": many(_record(FaultCount)), "uploads": optional(_record(UploadTotals)),
        "destinations": many(_record(UploadTotals)),
        "last_metrics": many(_record(Metric)), "notices": many(_record(Notice)),
        "sinks": many(_record(SinkCounts)), "table": many(_record(MetricRow)),
        "stop_rule": optional(_record(Firing)), "followed": optional(_record(TailStats)),
    }


def write_summary(summary: RunSummary, run_dir: "str | os.PathLike[str]") -> Path:
    """RUN_DIR/summary.json, replaced atomically; secrets masked (a warning, an upload error or the
    command may quote a URL with its password: the file is read by people and dashboards)."""
    from ..secrets import mask_text

    path = Path(run_dir) / SUMMARY_NAME
    tmp = path.with_name(SUMMARY_NAME + ".tmp")
    tmp.write_text(mask_text(json.dumps(_plain(summary), indent=1)) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_summary(run_dir: "str | os.PathLike[str]") -> RunSummary:
    """The RunSummary a finished run left in `run_dir`; ConfigError (one line) when there is
    none (the run has not finished, or was killed) or it cannot be read whole."""
    path = Path(run_dir) / SUMMARY_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no summary (the run has not finished, or was killed before its end)") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from exc
    decoders = _decoders()
    known = {f.name for f in fields(RunSummary)}
    try:
        return RunSummary(**{k: decoders.get(k, _number)(v) for k, v in data.items() if k in known})
    except (TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{path}: not a trainvisor run summary: {exc}") from exc
