"""The fallback: ``name=value``, ``name: value`` and JSON-lines records.

Index keys (``step``, ``iter``, ``iteration``, ``global_step``, ``epoch``) set the
record's position instead of becoming metrics; ``100/23196`` counts as 100.
In JSON records, numbers written as strings (``"loss": "0.22"``, as Katib's JSON
format and TRL write them) are numbers, and time keys (``timestamp``, ``time``,
``wall_time``) are the record's time, never metrics.
Names prefixed ``val_``/``eval_``/``test_``/``valid_`` are validation values.
Unlike a bare ``(\\w+)=(\\S+)`` rule, ``loss = nan`` is a NaN metric and
``Train net output #1: loss = 0.3`` is named ``loss``, not ``1``.
"""
from __future__ import annotations

import json
import math
import re
from typing import ClassVar

from ..events import PHASE_TRAIN, PHASE_VAL, Metric
from . import register_parser
from .base import LineParser
from .common import NUMBER, NameTable, as_float, to_float
from .tables import TABLE_MARKERS, EvalTables

__all__ = ["GenericParser"]

_PAIR_RE = re.compile(
    r"(?<![\w.@/-])([A-Za-z_][\w./@-]*(?: [A-Za-z_][\w.@-]*)?)\s*[:=]\s*(" + NUMBER + r")(?:/\d+)?(?![\w.:])"
)
_ITER_KEYS = frozenset({"step", "iter", "iteration", "global_step", "it", "batch", "Step", "Iter", "Iteration"})
_EPOCH_KEYS = frozenset({"epoch", "Epoch"})
_VAL_PREFIXES = ("val_", "eval_", "test_", "valid_", "validation_")
_MAX_LIST = 64
_TIME_KEYS = frozenset({"timestamp", "time", "wall_time"})
_PHASE_KEYS = frozenset({"mode", "phase", "split"})
_NUMBER_TEXT = re.compile(r"\s*" + NUMBER + r"\s*")


@register_parser
class GenericParser(LineParser):
    name: ClassVar[str] = "generic"
    description: ClassVar[str] = "fallback: name=value / name: value pairs and JSON-lines records (step/iter/epoch keys index them)"
    markers: ClassVar[tuple[str, ...]] = ("=", ":") + TABLE_MARKERS
    signature: ClassVar[str] = ""

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._names = NameTable(val_prefixes=_VAL_PREFIXES)
        self._train_names = NameTable(val_prefixes=("train_",))
        self._tables = EvalTables()
        self._step: int | None = None  # the last step and epoch a record gave: an evaluation table's position
        self._epoch: float | None = None

    def parse_line(self, text, number, wall_time):
        table = self._tables.read(text, number, wall_time, self._step, self._epoch)
        if table is not None:
            return table
        if "=" not in text and ":" not in text:
            return None
        s = text.strip()
        if s.startswith("{") and s.endswith("}") and '"' in s:
            return self._json(s, number, wall_time)
        found = _PAIR_RE.findall(text)
        if not found:
            return None
        step = epoch = None
        items = []
        for key, raw in found:
            short = key.rsplit(" ", 1)[-1]
            if short in _ITER_KEYS:
                v = to_float(raw)
                if v is not None and v == v and abs(v) < 1e15:
                    step = int(v)
                continue
            if short in _EPOCH_KEYS:
                epoch = to_float(raw)
                continue
            v = to_float(raw)
            if v is not None:
                items.append((short, v))
        return self._emit(items, step, epoch, None, number, wall_time)

    def _emit(self, items, step, epoch, phase, number, wall_time):
        if step is not None:
            self._step = step
        if epoch is not None:
            self._epoch = epoch
        out = []
        names, train = self._names, self._train_names
        for key, v in items:
            name, ph = names(key)
            if ph == PHASE_TRAIN:
                name = train(key)[0]
            out.append(Metric(name, v, step, phase or ph, None, None, epoch, wall_time, number))
        return out

    def _json(self, s, number, wall_time):
        try:
            rec = json.loads(s)
        except ValueError:
            return None
        if not isinstance(rec, dict):
            return None
        step = epoch = phase = None
        items = []
        for k, v in rec.items():
            if isinstance(v, bool) or k in _TIME_KEYS:
                continue
            if isinstance(v, str):
                if k in _PHASE_KEYS:
                    phase = PHASE_VAL if v in ("val", "eval", "valid", "validation", "test") else PHASE_TRAIN
                    continue
                if _NUMBER_TEXT.fullmatch(v) is None:
                    continue
                v = to_float(v)
            if isinstance(v, (int, float)):
                f = as_float(v)
                if k in _ITER_KEYS:
                    step = int(f) if f is not None and math.isfinite(f) else None
                elif k in _EPOCH_KEYS:
                    epoch = f
                elif f is not None:
                    items.append((k, f))
            elif isinstance(v, list) and len(v) <= _MAX_LIST:
                items.extend((f"{k}/{i}", f) for i, x in enumerate(v)
                             if isinstance(x, (int, float)) and not isinstance(x, bool) and (f := as_float(x)) is not None)
        return self._emit(items, step, epoch, phase, number, wall_time)
