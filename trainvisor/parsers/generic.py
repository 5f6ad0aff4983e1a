"""The fallback: ``name=value``, ``name: value`` and JSON-lines records.

Index keys (``step``, ``iter``, ``iteration``, ``global_step``, ``epoch``) set the
record's position instead of becoming metrics; ``100/23196`` counts as 100.
In JSON records, numbers written as strings (``"loss": "0.22"``, as Katib's JSON
format and TRL write them) are numbers, and time keys (``timestamp``, ``time``,
``wall_time``) are the record's time, never metrics.
Phases come from the names, by the rule every ``key: value`` parser shares
(`common.split_phase`): ``Train Loss`` -> ``Loss``/train, ``Dev F1-macro`` ->
``F1-macro``/val, ``val_loss`` -> ``loss``/val, ``test-acc`` -> ``acc``/test.
Configuration dumps before training starts (``dropout: 0.5``, ``batch_size: 32``,
``Namespace(lr=0.1)``) are not metrics. Training has started at the first line
with a step or epoch key, a name that says it is a result (loss, accuracy, F1,
AP, ...; `_RESULT_WORDS`), or a name printed again with another value (a series,
such as ``warmup: 0``, ``warmup: 1``: its held values are then reported; a
setting printed twice, in a ``Namespace(...)`` and a dump, keeps its value). Until then
values are held; those still held when training starts were configuration and
are dropped, as are those held at the end of a log where it never started.
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
from .bars import BarMetrics, may_be_bar
from .base import LineParser
from .common import NUMBER, NameTable, as_float, to_float
from .tables import TABLE_MARKERS, EvalTables

__all__ = ["GenericParser"]

_PAIR_RE = re.compile(
    r"(?<![\w.@/-])([A-Za-z_][\w./@-]*(?: [A-Za-z_][\w.@-]*)?)\s*[:=]\s*(" + NUMBER + r")(?:/\d+)?(?![\w.:])"
)
_ITER_KEYS = frozenset({"step", "iter", "iteration", "global_step", "it", "batch", "Step", "Iter", "Iteration"})
_EPOCH_KEYS = frozenset({"epoch", "Epoch"})
# A name that says it is a result of training, not a setting.
_RESULT_WORDS = re.compile(
    r"(?:^|[^a-z])(?:loss(?:es)?|acc(?:uracy)?|err(?:or)?|f1|m?ap|ar|auc|ppl|perplexity|bleu|rouge\w*|m?iou|precision"
    r"|recall|score|dice|wer|cer|r?mse|mae|reward|top-?\d+)(?:[^a-z]|$)", re.I)
_MAX_LIST = 64
_HELD_LIMIT = 256  # names held before the start; more are configuration
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
        self._names = NameTable(val_prefixes=())
        self._started = False  # a step/epoch key, a result's name or a repeated name was seen
        self._held: dict[str, list[Metric]] = {}  # before the start: name -> its value, maybe configuration
        self._tables = EvalTables()
        self._step: int | None = None  # the last step and epoch a record gave: an evaluation table's position
        self._epoch: float | None = None
        self._bars = BarMetrics(self._names)  # progress-bar postfixes (bars.py)

    def parse_line(self, text, number, wall_time):
        if may_be_bar(text) and (bar := self._bars.read(text, number, wall_time)) is not None:
            return bar
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
                items.append((key, v))
        if not self._started:
            if step is None and epoch is None and not any(_RESULT_WORDS.search(k) for k, _ in items):
                return self._before_start(items, number, wall_time)
            self._held.clear()  # configuration
        return self._emit(items, step, epoch, None, number, wall_time)

    def _before_start(self, items, number, wall_time):
        """Values that may be configuration: held until a name comes again with another value (a series)."""
        held = self._held
        if not any(k in held and held[k][0].value != v for k, v in items):
            if len(held) < _HELD_LIMIT:
                for key, v in items:
                    held[key] = self._emit([(key, v)], None, None, None, number, wall_time, start=False)
            return None
        out = [m for k, _ in items if k in held for m in held[k]]
        held.clear()
        return out + self._emit(items, None, None, None, number, wall_time)

    def _emit(self, items, step, epoch, phase, number, wall_time, start=True):
        if step is not None:
            self._step = step
        if epoch is not None:
            self._epoch = epoch
        self._started = self._started or start
        out = []
        names = self._names
        for key, v in items:
            name, ph = names(key)
            if " " in name:  # "Average loss: 0.3": the last word names it
                name = name.rsplit(" ", 1)[-1]
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
