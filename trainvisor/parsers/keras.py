"""Keras / tf.keras / Keras 3: ``Epoch E/N`` then progress-bar or verbose=2 metric lines.

ModelCheckpoint's ``Epoch 1: saving model to ckpt/weights.01.keras`` (printed before the save)
is a `CheckpointEvent` of kind ``keras`` with the epoch as printed."""
from __future__ import annotations

import re
from typing import ClassVar

from ..events import CheckpointEvent
from . import register_parser
from .announcements import KIND_KERAS, keras_save
from .base import LineParser
from .common import NUMBER, NameTable, fnum, metrics_from_pairs

__all__ = ["KerasParser"]

_EPOCH_RE = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
_STEP_RE = re.compile(r"^\s*(\d+)/(\d+)\b")
_KV_RE = re.compile(r" - ([A-Za-z_][\w./@-]*): (" + NUMBER + r")(?![\w.])")
_SKIP = frozenset({"ETA"})


@register_parser
class KerasParser(LineParser):
    name: ClassVar[str] = "keras"
    description: ClassVar[str] = "Keras / tf.keras / Keras 3 progress bars and verbose=2 lines (' - loss: ... - val_loss: ...')"
    markers: ClassVar[tuple[str, ...]] = (" - ",)
    signature: ClassVar[str] = r"^\s*Epoch \d+/\d+\s*$|\d+/\d+ \S*\s*-? ?\d+m?s \d*[mu]?s/step - |^\d+s - loss: "

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._epoch: int | None = None
        self._names = NameTable()

    def parse_line(self, text, number, wall_time):
        if " - " not in text:
            if "Epoch " in text:
                m = _EPOCH_RE.match(text)
                if m:
                    self._epoch = int(m.group(1))
                    return None
                saved = keras_save(text)
                if saved is not None:
                    return [CheckpointEvent(saved.path, KIND_KERAS, None, fnum(saved.epoch), number, wall_time)]
            return None
        found = _KV_RE.findall(text)
        if not found:
            return None
        step = None
        m = _STEP_RE.match(text)
        if m:
            n, total = int(m.group(1)), int(m.group(2))
            step = (self._epoch - 1) * total + n if self._epoch else n
        epoch = fnum(self._epoch) if self._epoch is not None else None
        return metrics_from_pairs(found, self._names, iteration=step, epoch=epoch, seconds=None,
                                  wall_time=wall_time, line=number, skip=_SKIP)
