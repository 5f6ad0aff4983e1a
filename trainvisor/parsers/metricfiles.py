"""Metric files a training writes beside its log, read into `Metric`s: pure functions, no files.

A metric file is not a log: its records are already structured, so each becomes one `Metric` per
numeric value, named and phased the way the console parsers name theirs (`split_phase`:
``val_loss`` is loss of phase val, ``train/loss_epoch`` loss_epoch of phase train).

- JSON lines (detectron2's ``metrics.json``, mmdetection's ``*.log.json``, DETR's ``log.txt``):
  one record a line; nested dicts flattened with ``/``; mmdetection's ``mode`` says the phase of
  the keys that carry none.
- CSV with a header (Lightning's ``metrics.csv``, Ultralytics' ``results.csv``): one record a row,
  one metric a non-empty numeric cell; the header's names are stripped (Ultralytics pads them).
- A Trainer's ``trainer_state.json``: one JSON document; each entry of its ``log_history`` is a
  record.

In every record ``epoch`` is the metric's epoch and ``step``, ``iter`` or ``iteration`` its
iteration; they are not metrics themselves. A record with neither that holds text as well as
numbers describes a setup, not a step (mmdetection's first line: its environment and seed): it
gives no metric.
"""
from __future__ import annotations

import csv
import json
import math
from typing import Any, Optional

from ..events import PHASE_TEST, PHASE_TRAIN, PHASE_VAL, Metric
from .common import split_phase, to_float

__all__ = ["file_kind", "json_line_metrics", "record_metrics", "csv_header", "csv_row_metrics",
           "trainer_state_history", "KIND_CSV", "KIND_JSONL", "KIND_DOCUMENT"]

KIND_CSV, KIND_JSONL, KIND_DOCUMENT = "csv", "jsonl", "document"

EPOCH_KEYS = frozenset({"epoch"})
ITERATION_KEYS = frozenset({"step", "iter", "iteration"})
# mmdetection's `mode` names the phase of a whole record
_MODES = {"train": PHASE_TRAIN, "val": PHASE_VAL, "eval": PHASE_VAL, "test": PHASE_TEST}


def file_kind(name: str) -> str:
    """How a file is read, from its name: ``*.csv`` by rows under a header, ``trainer_state.json``
    as one document, anything else as JSON lines."""
    base = name.rsplit("/", 1)[-1]
    if base.endswith(".csv"):
        return KIND_CSV
    if base == "trainer_state.json":
        return KIND_DOCUMENT
    return KIND_JSONL


def _flatten(record: dict, prefix: str, out: dict[str, Any]) -> None:
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            _flatten(value, name + "/", out)
        else:
            out[name] = value


def _number(value: Any) -> Optional[float]:
    """A record's value as a float: JSON numbers (not booleans), numeric strings (CSV cells,
    ``"NaN"``); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return math.inf
    if isinstance(value, str) and value.strip():
        return to_float(value.strip())
    return None


def record_metrics(record: dict, *, line: int, source: str, wall_time: float) -> list[Metric]:
    """One record (a JSON object, a CSV row as a dict) -> its metrics, in the record's key order."""
    flat: dict[str, Any] = {}
    _flatten(record, "", flat)
    epoch = iteration = None
    mode = PHASE_TRAIN
    values: list[tuple[str, float]] = []
    for key, raw in flat.items():
        low = key.lower()
        if low in EPOCH_KEYS or low in ITERATION_KEYS:
            number = _number(raw)
            if number is not None and math.isfinite(number):
                if low in EPOCH_KEYS:
                    epoch = number
                else:
                    iteration = int(number)
            continue
        if low == "mode" and isinstance(raw, str):
            mode = _MODES.get(raw.lower(), mode)
            continue
        number = _number(raw)
        if number is not None:
            values.append((key, number))
    if epoch is None and iteration is None and len(values) < len(flat):
        return []  # a setup record, not a step's (mmdetection's first line: its environment, its seed)
    out = []
    for key, value in values:
        split = split_phase(key)
        name, phase = split if split is not None else (key, mode)
        out.append(Metric(name, value, iteration, phase, None, None, epoch, wall_time, line, source))
    return out


def json_line_metrics(text: str, *, line: int, source: str, wall_time: float) -> Optional[list[Metric]]:
    """A JSON line's metrics; None when the line is not a JSON object (a partial or foreign line)."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    return record_metrics(record, line=line, source=source, wall_time=wall_time)


def csv_header(text: str) -> tuple[str, ...]:
    """A CSV header line's column names, stripped."""
    return tuple(name.strip() for name in next(csv.reader([text]), []))


def csv_row_metrics(header: tuple[str, ...], text: str, *, line: int, source: str,
                    wall_time: float) -> list[Metric]:
    """A CSV row under `header` -> a metric per non-empty numeric cell (a row longer than its
    header keeps only the named cells)."""
    cells = next(csv.reader([text]), [])
    record = {name: cell for name, cell in zip(header, cells) if name and cell.strip()}
    return record_metrics(record, line=line, source=source, wall_time=wall_time)


def trainer_state_history(text: str) -> Optional[list]:
    """A ``trainer_state.json``'s ``log_history``; None while the document is not whole JSON (the
    Trainer rewrites it in place: a reader may see it half written)."""
    try:
        state = json.loads(text)
    except ValueError:
        return None
    history = state.get("log_history") if isinstance(state, dict) else None
    return history if isinstance(history, list) else None
