"""TensorFlow 1 / Estimator: ``loss = 0.69, step = 1``, ``global_step/sec: 12.3``, eval dicts, checkpoints.

With absl logging the same hook line is printed twice (``I1010 ... ] loss = ...``
and ``INFO:tensorflow:loss = ...``); a record identical to the previous one of
its kind is dropped so nothing is double-counted.
"""
from __future__ import annotations

import re
from typing import ClassVar

from ..events import PHASE_TRAIN, PHASE_VAL, CheckpointEvent, Metric
from . import register_parser
from .base import LineParser
from .common import NUMBER, NameTable, to_float

__all__ = ["TensorFlowParser"]

_LOSS_RE = re.compile(r"\]?\s*([\w/]+) = (" + NUMBER + r"), step = (\d+)")
_RATE_RE = re.compile(r"global_step/sec: (" + NUMBER + ")")
_DICT_RE = re.compile(r"Saving dict for global step (\d+): (.*)$")
_KV_RE = re.compile(r"([A-Za-z_][\w./@-]*) = (" + NUMBER + r")(?![\w.])")
_CKPT_RE = re.compile(r"Saving checkpoints for (\d+) into (.+?)\.?\s*$")


@register_parser
class TensorFlowParser(LineParser):
    name: ClassVar[str] = "tensorflow"
    description: ClassVar[str] = "TensorFlow 1 / Estimator 'loss = X, step = N', global_step/sec, eval dicts, checkpoints (absl duplicates dropped)"
    markers: ClassVar[tuple[str, ...]] = ("step = ", "global_step/sec", "Saving dict for global step", "Saving checkpoints for")
    signature: ClassVar[str] = r"(?:INFO:tensorflow:|\] )(?:loss = \S+, step = \d+|global_step/sec: |Saving checkpoints for \d+)"

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._step: int | None = None
        self._last: tuple = ()
        self._names = NameTable(val_prefixes=("eval_",))

    def _fresh(self, key: tuple) -> bool:
        if key == self._last:
            return False
        self._last = key
        return True

    def parse_line(self, text, number, wall_time):
        if "step = " in text:
            m = _LOSS_RE.search(text)
            if m and "Saving dict" not in text:
                step = self._step = int(m.group(3))
                v = to_float(m.group(2))
                if v is None or not self._fresh(("loss", m.group(1), m.group(2), step)):
                    return None
                return [Metric(m.group(1), v, step, PHASE_TRAIN, None, None, None, wall_time, number)]
        if "global_step/sec" in text:
            m = _RATE_RE.search(text)
            if m and self._fresh(("rate", m.group(1), self._step)):
                v = to_float(m.group(1))
                if v is not None:
                    return [Metric("global_step/sec", v, self._step, PHASE_TRAIN, None, None, None, wall_time, number)]
            return None
        if "Saving dict for global step" in text:
            m = _DICT_RE.search(text)
            if m and self._fresh(("eval", m.group(1), m.group(2))):
                step = int(m.group(1))
                out, seen = [], set()
                found = _KV_RE.findall(m.group(2))
                # eval_loss and the mode's own loss both name "loss": the eval_ spelling wins
                found.sort(key=lambda kv: not kv[0].startswith("eval_"))
                for k, raw in found:
                    v = to_float(raw)
                    name = self._names(k)[0]
                    if v is None or k == "global_step" or name in seen:
                        continue
                    seen.add(name)
                    out.append(Metric(name, v, step, PHASE_VAL, None, None, None, wall_time, number))
                return out
            return None
        if "Saving checkpoints for" in text:
            m = _CKPT_RE.search(text)
            if m and self._fresh(("ckpt", m.group(1))):
                step = int(m.group(1))
                return [CheckpointEvent(f"{m.group(2)}-{step}", "ckpt", step, None, number, wall_time)]
        return None
