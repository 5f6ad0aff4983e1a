"""mmdetection 2.x / mmengine text logs and their ``.log.json`` JSON-lines companions.

Text: ``Epoch [1][50/361]\\tlr: 2.473e-04, ..., loss: 1.4563`` (2.x),
``Epoch(train) [1][ 50/361]  lr: ...  loss: ...`` and ``Epoch(val) [1][361/361]  coco/bbox_mAP: ...``
(mmengine), ``Iter(train) [ 50/90000] ...`` (iteration-based runners).
`iteration` is global: (epoch - 1) * iterations per epoch + iter; the JSON
lines carry no per-epoch total, so it is learned from the first epoch's last
record (or taken from ``--iters-per-epoch``).

``Saving checkpoint at 12 epochs`` (printed before the save) names no path: the checkpoint is
``epoch_12.pth`` (``iter_N.pth``) in the checkpoint folder, which the log gives as
``Checkpoints will be saved to DIR`` (mmengine, mmcv >= 1.4), else as the runner's
``work_dir: DIR`` (mmcv's ``Start running`` line) or the config dump's ``work_dir = 'DIR'``.
Before any of them the save yields no event: a path made up relative to the working
directory would be wrong, and the watcher would look for it in the wrong place.
"""
from __future__ import annotations

import json
import os
import re
from typing import ClassVar

from ..events import PHASE_TRAIN, PHASE_VAL, CheckpointEvent, Metric
from . import register_parser
from .common import NUMBER, as_float, fnum, to_float
from .tables import TABLE_MARKERS, TableReadingParser

__all__ = ["MMDetParser"]

_EPOCH_RE = re.compile(r"\b(Epoch|Iter)(?:\((\w+)\))?\s*(?:\[(\d+)\])?\s*\[\s*(\d+)/(\d+)\]")
_KV_RE = re.compile(r"([A-Za-z_][\w./@-]*): (" + NUMBER + r")(?![\w.:])")
_SAVE_RE = re.compile(r"Saving checkpoint at (\d+) (epochs|iterations)")
_OUT_DIR_RE = re.compile(r"Checkpoints will be saved to (\S.*?)(?: by \w+)?\.\s*$")
_WORK_DIR_RE = re.compile(r"(?:\bwork_dir: |^work_dir = ['\"])([^'\",\s][^'\",]*?)['\"]?\s*$")
_VAL_MODES = frozenset({"val", "test"})


@register_parser
class MMDetParser(TableReadingParser):
    name: ClassVar[str] = "mmdet"
    description: ClassVar[str] = "mmdetection 2.x / mmengine text logs (Epoch [e][i/n], Epoch(val), Iter(train)) and .log.json lines"
    markers: ClassVar[tuple[str, ...]] = ("Epoch", "Iter", '"mode"', "Saving checkpoint at") + TABLE_MARKERS
    signature: ClassVar[str] = r"(?:Epoch|Iter)(?:\(\w+\))?\s*(?:\[\d+\])?\s*\[\s*\d+/\d+\]\s+(?:base_)?lr: |^\{\"mode\": \"(?:train|val)\"| - mmdet - INFO - "

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._ipe = self.options.iters_per_epoch
        self._json_epoch = 0
        self._max_iter = 0
        self._out_dir: str | None = None    # from "Checkpoints will be saved to"
        self._work_dir: str | None = None   # from work_dir (the default checkpoint folder)

    def parse_own(self, text, number, wall_time):
        if '"mode"' in text and text.lstrip().startswith("{"):
            return self._json(text, number, wall_time)
        if "Epoch" in text or "Iter" in text:
            return self._text(text, number, wall_time)
        if "Saving checkpoint at" in text:
            return self._saving(text, number, wall_time)
        if "work_dir" in text or "Checkpoints will be saved to" in text:
            self._learn_folder(text)
        return None

    def _learn_folder(self, text: str) -> None:
        m = _OUT_DIR_RE.search(text)
        if m:
            self._out_dir = m.group(1)
            return
        m = _WORK_DIR_RE.search(text)
        if m:
            self._work_dir = m.group(1)

    def _saving(self, text, number, wall_time):
        m = _SAVE_RE.search(text)
        folder = self._out_dir or self._work_dir
        if m is None or folder is None:
            return None
        n = int(m.group(1))
        if m.group(2) == "epochs":
            return [CheckpointEvent(os.path.join(folder, f"epoch_{n}.pth"), "pth", None, fnum(n), number, wall_time)]
        return [CheckpointEvent(os.path.join(folder, f"iter_{n}.pth"), "pth", n, None, number, wall_time)]

    def _text(self, text, number, wall_time):
        m = _EPOCH_RE.search(text)
        if m is None:
            return None
        kind, mode, ep, n, total = m.group(1), m.group(2), m.group(3), int(m.group(4)), int(m.group(5))
        items = [
            (k, v) for k, raw in _KV_RE.findall(text, m.end())
            if not k.endswith("_copypaste") and (v := to_float(raw)) is not None
        ]
        if not items:
            return None
        if mode:
            phase = PHASE_VAL if mode in _VAL_MODES else PHASE_TRAIN
        else:  # mmdet 2.x prints evaluation with the train prefix: no time/loss fields there
            phase = PHASE_TRAIN if any(k == "time" or "loss" in k for k, _ in items) else PHASE_VAL
        if kind == "Iter" or ep is None:
            step, epoch = n, None
        else:
            e = int(ep)
            step, epoch = (e - 1) * total + n, fnum(e)
        if phase == PHASE_TRAIN:
            self._step, self._epoch = step, epoch
        return [Metric(k, v, step, phase, None, None, epoch, wall_time, number) for k, v in items]

    def _json(self, text, number, wall_time):
        try:
            rec = json.loads(text)
        except ValueError:
            return None
        if not isinstance(rec, dict):
            return None
        mode = rec.get("mode")
        phase = PHASE_VAL if mode in _VAL_MODES else PHASE_TRAIN
        ep, it = rec.get("epoch"), rec.get("iter")
        step = epoch = None
        if isinstance(ep, int) and isinstance(it, int):
            if ep != self._json_epoch:
                if self._ipe is None and self._json_epoch == 1:
                    self._ipe = self._max_iter
                self._json_epoch = ep
            if ep == 1:
                self._max_iter = max(self._max_iter, it)
            step = (ep - 1) * self._ipe + it if self._ipe else (it if ep == 1 else None)
            epoch = fnum(ep)
        elif isinstance(it, int):
            step = it
        out = []
        for k, v in rec.items():
            if k in ("mode", "epoch", "iter") or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            f = as_float(v)
            if f is not None:
                out.append(Metric(k, f, step, phase, None, None, epoch, wall_time, number))
        return out
