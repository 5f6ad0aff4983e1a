"""darknet (pjreddie / AlexeyAB): ``N: loss, avg avg, lr rate, S seconds, I images`` and ``Region`` lines.

``-nan`` is common in ``Region`` lines early in training; it is reported as NaN.
A ``Region`` line belongs to the iteration being computed, i.e. the last
printed one + 1.
"""
from __future__ import annotations

import re
from typing import ClassVar

from ..events import PHASE_TRAIN, CheckpointEvent, Metric
from . import register_parser
from .base import LineParser
from .common import NUMBER, to_float

__all__ = ["DarknetParser"]

_N = "(" + NUMBER + ")"
_ITER_RE = re.compile(r"^\s*(\d+): " + _N + ", " + _N + r" avg(?: loss)?, " + _N + r" rate, " + _N + r" seconds, (\d+) images")
_REGION_RE = re.compile(r"Region (\d+) (.*)$")
_REGION_KV = re.compile(r"([A-Za-z.][\w. ]*?): " + _N + r"(?=,|\s|$)")
_SAVE_RE = re.compile(r"Saving weights to (\S+\.weights)")
_ITER_NAMES = ("loss", "avg_loss", "lr", "seconds", "images")


@register_parser
class DarknetParser(LineParser):
    name: ClassVar[str] = "darknet"
    description: ClassVar[str] = "darknet iteration lines (loss, avg, rate, seconds, images) and Region IOU/recall lines, -nan included"
    markers: ClassVar[tuple[str, ...]] = (" avg", "Region ", "Saving weights to")
    signature: ClassVar[str] = r"^\s*\d+: [-\w.]+, [-\w.]+ avg(?: loss)?, [\d.e-]+ rate|^Region \d+ Avg IOU: "

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._iter: int | None = None
        self._names: dict[tuple[str, str], str] = {}

    def parse_line(self, text, number, wall_time):
        if " avg" in text:
            m = _ITER_RE.match(text)
            if m:
                it = self._iter = int(m.group(1))
                vals = (to_float(m.group(2)), to_float(m.group(3)), to_float(m.group(4)), to_float(m.group(5)),
                        float(m.group(6)))
                return [Metric(n, v, it, PHASE_TRAIN, None, None, None, wall_time, number)
                        for n, v in zip(_ITER_NAMES, vals) if v is not None]
        if text.startswith("Region "):
            m = _REGION_RE.match(text)
            if m is None:
                return None
            it = self._iter + 1 if self._iter is not None else None
            out = []
            for key, raw in _REGION_KV.findall(m.group(2)):
                v = to_float(raw)
                if v is not None:
                    out.append(Metric(self._name(m.group(1), key), v, it, PHASE_TRAIN, None, None, None,
                                      wall_time, number))
            return out
        if "Saving weights to" in text:
            m = _SAVE_RE.search(text)
            if m:
                return [CheckpointEvent(m.group(1), "weights", self._iter, None, number, wall_time)]
        return None

    def _name(self, region: str, key: str) -> str:
        k = (region, key)
        name = self._names.get(k)
        if name is None:
            if len(self._names) > 4096:
                self._names.clear()
            name = self._names[k] = f"region{region}/" + key.strip().lower().replace(" ", "_")
        return name
