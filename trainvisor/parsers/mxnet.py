"""MXNet: Module/FeedForward Speedometer and epoch lines, Gluon ``[Epoch E][Batch B]`` lines."""
from __future__ import annotations

import re
from typing import ClassVar

from ..events import PHASE_TRAIN, CheckpointEvent, Metric
from . import register_parser
from .base import LineParser
from .common import NUMBER, NameTable, fnum, to_float

__all__ = ["MXNetParser"]

_EPOCH_RE = re.compile(r"(?:Epoch\[(\d+)\]|\[Epoch (\d+)\])(?:\s*\[?Batch\s*\[?\s*(\d+)\]?)?")
_KV_RE = re.compile(r"([A-Za-z_][\w.@/-]*?)[=:]\s*(" + NUMBER + r")(?![\w.])")
_SPEED_RE = re.compile(r"Speed:\s*(" + NUMBER + r")\s*samples/sec")
_SAVED_RE = re.compile(r'Saved checkpoint to "?([^"]*?-(\d+)\.params)"?\s*$')
_TIME_COST_RE = re.compile(r"Time cost=(" + NUMBER + ")")


@register_parser
class MXNetParser(LineParser):
    name: ClassVar[str] = "mxnet"
    description: ClassVar[str] = "MXNet Speedometer / Train- / Validation- / Time cost lines, Gluon [Epoch E][Batch B], checkpoints"
    markers: ClassVar[tuple[str, ...]] = ("Epoch[", "[Epoch ", "Saved checkpoint")
    signature: ClassVar[str] = r"Epoch\[\d+\] (?:Batch|Train-|Validation-|Time cost)|\[Epoch \d+\]\[Batch \d+\]|Saved checkpoint to \".*\.params"

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._names = NameTable(val_prefixes=("Validation-", "val_"))
        self._epoch: int | None = None

    def feed(self, block):
        t = block.text
        if "Epoch" not in t and "Saved checkpoint" not in t:
            return []
        return super().feed(block)

    def parse_line(self, text, number, wall_time):
        if "Epoch" not in text:
            if "Saved checkpoint" in text:
                m = _SAVED_RE.search(text)
                if m:
                    ep = int(m.group(2))
                    return [CheckpointEvent(m.group(1), "params", None, fnum(ep), number, wall_time)]
            return None
        m = _EPOCH_RE.search(text)
        if m is None:
            return None
        epoch = int(m.group(1) or m.group(2))
        self._epoch = epoch
        batch = int(m.group(3)) if m.group(3) else None
        rest = text[m.end():]
        out = []
        ep = fnum(epoch)
        if batch is not None:
            s = _SPEED_RE.search(rest)
            if s:
                v = to_float(s.group(1))
                if v is not None:
                    out.append(Metric("samples_per_sec", v, batch, PHASE_TRAIN, None, None, ep, wall_time, number))
                rest = rest[s.end():]
        elif "Time cost=" in rest:
            s = _TIME_COST_RE.search(rest)
            if s:
                v = to_float(s.group(1))
                if v is not None:
                    return [Metric("time_cost", v, None, PHASE_TRAIN, None, None, ep, wall_time, number)]
            return None
        names = self._names
        for km in _KV_RE.finditer(rest):
            key = km.group(1)
            v = to_float(km.group(2))
            if v is None or key == "Speed":
                continue
            if key.startswith("Train-"):
                key = key[6:]
            name, phase = names(key)
            out.append(Metric(name, v, batch, phase, None, None, ep, wall_time, number))
        return out
