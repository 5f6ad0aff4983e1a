"""Hugging Face Trainer / TRL: the logged dict lines ``{'loss': 0.5, 'learning_rate': 5e-05, 'epoch': 0.1}``.

TRL prints values as strings (``'loss': '2.897'``); both spellings are read.
The Trainer prints no step, so `iteration` is the count of train log dicts seen
(dicts with a ``loss``: the Trainer logs one every ``logging_steps``), and `epoch` is the dict's own.
``Saving model checkpoint to out/checkpoint-500`` (printed before the Trainer writes the
folder's files) is a `CheckpointEvent` of kind ``trainer`` whose iteration is the folder's step.
"""
from __future__ import annotations

import re
from typing import ClassVar

from ..events import CheckpointEvent
from . import register_parser
from .announcements import KIND_TRAINER, huggingface_save
from .base import LineParser
from .common import NUMBER, NameTable, metrics_from_pairs, to_float

__all__ = ["HuggingFaceParser"]

_KV_RE = re.compile(r"'([A-Za-z_][\w./@-]*)': '?(" + NUMBER + r")'?(?=[,}])")


@register_parser
class HuggingFaceParser(LineParser):
    name: ClassVar[str] = "huggingface"
    description: ClassVar[str] = "Hugging Face Trainer / TRL logged dicts {'loss': ..., 'epoch': ...} (numbers or quoted strings)"
    markers: ClassVar[tuple[str, ...]] = ("'epoch'",)
    signature: ClassVar[str] = r"\{'(?:loss|eval_loss|train_runtime)': '?[-\d.]|\*\*\*\*\* Running (?:training|Evaluation) \*\*\*\*\*"

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._names = NameTable(val_prefixes=("eval_",), keep_prefixes=("train_",))
        self._logs = 0

    def feed(self, block):
        if "'epoch'" not in block.text and "Saving model checkpoint" not in block.text:
            return []
        return super().feed(block)

    def parse_line(self, text, number, wall_time):
        if "'epoch'" not in text:
            saved = huggingface_save(text) if "Saving model" in text else None
            if saved is None:
                return None
            return [CheckpointEvent(saved.path, KIND_TRAINER, saved.iteration, None, number, wall_time)]
        # From the dict's opening brace: a bar redrawn over a dict leaves the dict's tail
        # on the row (a terminal state), which must not count as the dict again.
        start = text.find("{'")
        if start < 0:
            return None
        found = _KV_RE.findall(text, start)
        if not found:
            return None
        epoch = None
        items = []
        for key, raw in found:
            v = to_float(raw)
            if v is None:
                continue
            if key == "epoch":
                epoch = v
            else:
                items.append((key, v))
        if not items:
            return None
        if any(k == "loss" for k, _ in items):
            self._logs += 1
        return metrics_from_pairs(items, self._names, iteration=self._logs, epoch=epoch, seconds=None,
                                  wall_time=wall_time, line=number)
