"""YOLO family: YOLOv5/v7/Ultralytics epoch tables (stdout and ``results.txt``) and YOLOX loguru lines.

The v5/v7/Ultralytics trainers print a header (``Epoch gpu_mem box obj cls ...``)
then one row per epoch (a tqdm bar whose final state is the epoch's result),
and a validation header (``Class Images Labels P R mAP@.5 ...``) then an ``all``
row. Column names come from the last header seen; ``results.txt`` has no
header, so its v5 column layout is built in. YOLOv5/Ultralytics save ``last.pt``/``best.pt``
every epoch without a word; the one announcement is the final ``Optimizer stripped from
W.pt, 14.8MB``, printed after W is rewritten: a `CheckpointEvent` of kind ``stripped``.
"""
from __future__ import annotations

import re
from typing import ClassVar

from ..events import PHASE_TRAIN, PHASE_VAL, CheckpointEvent, Metric
from . import register_parser
from .announcements import KIND_STRIPPED, yolo_stripped
from .common import NUMBER, fnum, to_float
from .tables import TABLE_MARKERS, TableReadingParser

__all__ = ["YoloParser"]

_ROW_RE = re.compile(r"^\s*(\d+)/(\d+)\s+(\d+(?:\.\d+)?)G\s+(.*)$")
_NUM_RE = re.compile(NUMBER + r"(?=\s|:|$)")
_VAL_ROW_RE = re.compile(r"^\s*all\s+(.*)$")
_BAR_TAIL_RE = re.compile(r":\s*\d+%.*$")
_YOLOX_RE = re.compile(r"epoch: (\d+)/(\d+), iter: (\d+)/(\d+)")
_YOLOX_KV = re.compile(r"([A-Za-z_]\w*): (" + NUMBER + r")(?:s|Mb|MB|GB)?(?=,|\s*$)")
# YOLOv5 results.txt (v5.0 era): after epoch and gpu_mem.
_RESULTS_COLUMNS = ("box", "obj", "cls", "total", "labels", "img_size",
                    "P", "R", "mAP@.5", "mAP@.5:.95", "box", "obj", "cls")
_RESULTS_PHASES = (PHASE_TRAIN,) * 6 + (PHASE_VAL,) * 7


@register_parser
class YoloParser(TableReadingParser):
    name: ClassVar[str] = "yolo"
    description: ClassVar[str] = "YOLOv5/v7/Ultralytics epoch rows and val 'all' rows, results.txt tables, YOLOX 'epoch: e/n, iter: i/n' lines"
    markers: ClassVar[tuple[str, ...]] = ("/",) + TABLE_MARKERS
    signature: ClassVar[str] = (
        r"^\s+Epoch\s+(?:gpu_mem|GPU_mem)\s|^\s*\d+/\d+\s+\d+(?:\.\d+)?G(?:\s+[-\d.e+]+){4,}"
        r"|epoch: \d+/\d+, iter: \d+/\d+|yolox\.core\.trainer"
    )

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._train_cols: list[str] = []
        self._val_cols: list[str] = []

    def parse_own(self, text, number, wall_time):
        if "epoch: " in text:
            return self._yolox(text, number, wall_time)
        if "Optimizer stripped" in text:
            saved = yolo_stripped(text)
            return [CheckpointEvent(saved.path, KIND_STRIPPED, None, None, number, wall_time)] if saved else None
        stripped = text.strip()
        if stripped.startswith("Epoch "):
            self._train_cols = stripped.split()[2:]  # after Epoch, gpu_mem
            return None
        if stripped.startswith("Class "):
            head = _BAR_TAIL_RE.sub("", stripped).replace("Box(", "").replace(")", "").split()
            self._val_cols = head[3:]  # after Class, Images, Labels/Instances
            return None
        if "G " in text and "/" in text:
            m = _ROW_RE.match(text)
            if m:
                return self._row(m, number, wall_time)
        if "all " in text and self._val_cols:
            m = _VAL_ROW_RE.match(text)
            if m:
                vals = [to_float(x) for x in m.group(1).split()[2:]]
                if len(vals) == len(self._val_cols) and None not in vals:
                    return [Metric(n, v, None, PHASE_VAL, None, None, self._epoch, wall_time, number)
                            for n, v in zip(self._val_cols, vals)]
        return None

    def _row(self, m, number, wall_time):
        epoch = float(m.group(1))
        self._epoch = epoch
        rest = m.group(4).split(":", 1)[0] if self._train_cols else m.group(4)
        vals = [to_float(x) for x in rest.split()]
        if None in vals:
            return None
        out = [Metric("gpu_mem", float(m.group(3)), None, PHASE_TRAIN, None, None, epoch, wall_time, number)]
        if self._train_cols and len(vals) == len(self._train_cols):
            out += [Metric(n, v, None, PHASE_TRAIN, None, None, epoch, wall_time, number)
                    for n, v in zip(self._train_cols, vals)]
        elif len(vals) == len(_RESULTS_COLUMNS):
            out += [Metric(n, v, None, p, None, None, epoch, wall_time, number)
                    for n, v, p in zip(_RESULTS_COLUMNS, vals, _RESULTS_PHASES)]
        else:
            return None
        return out

    def _yolox(self, text, number, wall_time):
        m = _YOLOX_RE.search(text)
        if m is None:
            return None
        e, it, ipe = int(m.group(1)), int(m.group(3)), int(m.group(4))
        step, epoch = (e - 1) * ipe + it, fnum(e)
        self._step, self._epoch = step, epoch
        out = []
        for k, raw in _YOLOX_KV.findall(text, m.end()):
            v = to_float(raw)
            if v is not None:
                out.append(Metric(k, v, step, PHASE_TRAIN, None, None, epoch, wall_time, number))
        return out
