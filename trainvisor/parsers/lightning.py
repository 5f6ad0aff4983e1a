"""PyTorch Lightning progress bars: ``Epoch 1:  99%|...| 352/356 [03:04<00:02, 1.91it/s, loss=0.3, val_acc=0.227]``.

The bar's postfix repeats the last validation values on every update, so the
validation metrics of a bar are reported when that set of values changes, not
once per bar update.
"""
from __future__ import annotations

import re
from typing import ClassVar

from ..events import PHASE_VAL
from . import register_parser
from .base import LineParser
from .common import NUMBER, NameTable, fnum, metrics_from_pairs

__all__ = ["LightningParser"]

_BAR_RE = re.compile(r"Epoch (\d+):\s*\d+%\|[^|]*\|\s*(\d+)/(\d+) \[[^,\]]*(?:,[^,\]]*it/s|,[^,\]]*s/it)?(.*)\]")
_KV_RE = re.compile(r"([A-Za-z_][\w./@-]*)=(" + NUMBER + r")(?![\w.])")
_SKIP = frozenset({"v_num"})


@register_parser
class LightningParser(LineParser):
    name: ClassVar[str] = "lightning"
    description: ClassVar[str] = "PyTorch Lightning tqdm bars 'Epoch N: ..%|..| i/n [..., loss=..., val_acc=...]'"
    markers: ClassVar[tuple[str, ...]] = ("Epoch ",)
    signature: ClassVar[str] = r"Epoch \d+:\s*\d+%\|"

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._names = NameTable()
        self._last_val: tuple = ()

    def feed(self, block):
        if "Epoch " not in block.text:
            return []
        return super().feed(block)

    def parse_line(self, text, number, wall_time):
        if "Epoch " not in text or "%|" not in text:
            return None
        m = _BAR_RE.search(text)
        if m is None:
            return None
        epoch, n, total = int(m.group(1)), int(m.group(2)), int(m.group(3))
        step = epoch * total + n
        out, val = [], []
        for metric in metrics_from_pairs(_KV_RE.findall(m.group(4)), self._names, iteration=step,
                                         epoch=fnum(epoch), seconds=None, wall_time=wall_time, line=number,
                                         skip=_SKIP):
            (val if metric.phase == PHASE_VAL else out).append(metric)
        if val:
            sig = tuple((x.name, x.value) for x in val)
            if sig != self._last_val:
                self._last_val = sig
                out.extend(val)
        return out
