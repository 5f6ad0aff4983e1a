"""Golden metric files: a log's metric stream stored once, compared on every later replay.

A golden file is the JSONL `trainvisor replay --metrics` writes, without the wall-clock field
(`wall_time`) and the run's `attempt`: what the same bytes always give. A comparison names the
first differing record (its series, step and both values) and the records each series counts in
either, so a changed parser is seen at once in `trainvisor replay LOG --check GOLDEN.jsonl`
(and `--update-golden` writes the new stream after a change that was meant)."""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

from ..errors import ConfigError
from ..events import CheckpointEvent, Event, Metric, Notice

__all__ = ["GoldenDiff", "golden_records", "read_golden", "write_golden", "compare_golden", "format_diff",
           "events_from_jsonl"]

_CLOCK_FIELDS = ("wall_time", "attempt")


@dataclass(frozen=True)
class GoldenDiff:
    """`index`: the first differing record (0-based; None when equal), `golden`/`now` the two
    records there (None past the end of one). `counts`: (series, golden count, now count) of each
    series whose counts differ; a series is ``name/phase``, or ``checkpoint``/``notice``."""

    index: Optional[int]
    golden: Optional[dict]
    now: Optional[dict]
    golden_total: int
    now_total: int
    counts: tuple[tuple[str, int, int], ...]

    @property
    def equal(self) -> bool:
        return self.index is None


def _record(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in _CLOCK_FIELDS}


def golden_records(events: Iterable[Event]) -> list[dict]:
    """The records a golden file holds for `events` (JSON-safe; NaN as the string ``nan``)."""
    return [_record(e.to_json_dict()) for e in events]


def read_golden(path: "str | os.PathLike[str]") -> list[dict]:
    """The records of a golden file (or of any `--metrics` JSONL: clock fields are dropped)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read golden file {os.fspath(path)}: {exc.strerror} "
                          "(write it with --update-golden)") from exc
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(_record(json.loads(line)))
        except (ValueError, AttributeError) as exc:
            raise ConfigError(f"{os.fspath(path)}:{number}: not a JSON record ({exc})") from exc
    return out


def write_golden(path: "str | os.PathLike[str]", records: Sequence[dict]) -> None:
    tmp = Path(f"{os.fspath(path)}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def _series(r: dict) -> str:
    if "event" in r:
        return str(r["event"])
    return f"{r.get('name')}/{r.get('phase')}"


def compare_golden(golden: Sequence[dict], now: Sequence[dict]) -> GoldenDiff:
    index = next((i for i, (g, n) in enumerate(zip(golden, now)) if g != n), None)
    if index is None and len(golden) != len(now):
        index = min(len(golden), len(now))
    was, got = Counter(map(_series, golden)), Counter(map(_series, now))
    counts = tuple((s, was[s], got[s]) for s in sorted(was.keys() | got.keys()) if was[s] != got[s])
    at = (lambda rs: rs[index] if index is not None and index < len(rs) else None)
    return GoldenDiff(index, at(golden), at(now), len(golden), len(now), counts)


def _where(r: dict) -> str:
    """``loss/train at iteration 100 (line 340)``."""
    step = (f"iteration {r['iteration']}" if r.get("iteration") is not None
            else f"epoch {r['epoch']}" if r.get("epoch") is not None else "no step")
    return f"{_series(r)} at {step} (line {r.get('line')})"


def format_diff(diff: GoldenDiff, golden_path: str) -> str:
    """A readable account of a mismatch: the first differing record, then the series counts."""
    if diff.equal:
        return f"{golden_path}: {diff.now_total} records match"
    g, n = diff.golden, diff.now
    lines = [f"{golden_path}: the metric stream differs from the golden file "
             f"({diff.golden_total} golden records, {diff.now_total} now)"]
    if g is not None and n is not None:
        value = (f"golden {g.get('value')!r}, now {n.get('value')!r}" if g.get("value") != n.get("value")
                 else "other fields differ")
        lines.append(f"first difference at record {diff.index + 1}: {_where(g)}: {value}")
        fields = sorted(k for k in g.keys() | n.keys() if g.get(k) != n.get(k))
        lines += [f"  {k}: golden {g.get(k)!r}, now {n.get(k)!r}" for k in fields]
    elif g is not None:
        lines.append(f"first difference at record {diff.index + 1}: golden has {_where(g)}, now the stream ends")
    elif n is not None:
        lines.append(f"first difference at record {diff.index + 1}: now has {_where(n)}, the golden file ends")
    if diff.counts:
        lines.append("records per series (golden -> now): "
                     + ", ".join(f"{s} {a} -> {b}" for s, a, b in diff.counts))
    return "\n".join(lines)


def events_from_jsonl(path: "str | os.PathLike[str]") -> tuple[Event, ...]:
    """The events of a run's or replay's `--metrics` file, as the library's records."""
    out: list[Event] = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        kind = d.pop("event", None)
        d.pop("attempt", None)
        if kind is None:
            out.append(Metric.from_json_dict(d))
        elif kind == "checkpoint":
            out.append(CheckpointEvent(**d))
        elif kind == "notice":
            out.append(Notice(**d))
    return tuple(out)
