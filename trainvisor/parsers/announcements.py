"""Checkpoint announcements of the frameworks whose parsers share them: the exact strings,
in one place, checked against each framework's source.

Each reader takes one line and returns an `Announcement` (or None); the parser that owns
the format turns it into a `CheckpointEvent` with its `KIND_*`. The kind tells the watcher
what the line proves (see `trainvisor.watch.announce`): every save below is announced
BEFORE its file is written, except YOLO's ``Optimizer stripped from``, printed after.

- Hugging Face Trainer (``Trainer._save``): ``Saving model checkpoint to out/checkpoint-500``
  -- a directory; the Trainer writes the set's files into it after the line.
- Keras ``ModelCheckpoint`` (Keras 3: ``Epoch 1: saving model to ckpt/w.01.keras``; Keras 2:
  ``Epoch 00001: ...``; with ``save_best_only``: ``Epoch 3: val_loss improved from 0.40000
  to 0.31000, saving model to ...``; the first ``improved from`` says ``inf`` or ``None``).
  Keras 3's later ``Epoch 1: finished saving model to ...`` is not an announcement.
- PyTorch Lightning ``ModelCheckpoint`` (``rank_zero_info`` when ``verbose``): ``Epoch 0,
  global step 50: 'val_loss' reached 0.30000 (best 0.30000), saving model to
  '/ckpt/epoch=0-step=50.ckpt' as top 1``; 1.0-1.2 print ``step`` and no quotes, 0.x the
  Keras 2 form. ``... was not in top 1`` saves nothing.
- YOLOv5 / Ultralytics ``strip_optimizer``: ``Optimizer stripped from runs/train/exp/weights/
  last.pt, 14.8MB`` -- the final weights, rewritten in place before the line.
  ``Results saved to runs/...`` names a results folder, not a checkpoint.
"""
from __future__ import annotations

import os
import re
from typing import NamedTuple, Optional

__all__ = [
    "Announcement", "KIND_TRAINER", "KIND_KERAS", "KIND_LIGHTNING", "KIND_STRIPPED",
    "huggingface_save", "keras_save", "lightning_save", "yolo_stripped",
]

KIND_TRAINER = "trainer"      # a Hugging Face Trainer checkpoint directory (checkpoint-N)
KIND_KERAS = "keras"          # a Keras ModelCheckpoint file (.keras, .h5, .weights.h5)
KIND_LIGHTNING = "ckpt"       # a Lightning .ckpt file
KIND_STRIPPED = "stripped"    # YOLO's final weights, written before the line


class Announcement(NamedTuple):
    """A save the log announced: `path` as printed, the numbers as the log says them."""

    path: str
    iteration: Optional[int]
    epoch: Optional[int]


_HF_RE = re.compile(r"Saving model checkpoint to (\S.*?)\s*$")
_HF_STEP_RE = re.compile(r"^checkpoint-(\d+)$")
_KERAS_RE = re.compile(r"\bEpoch (\d+): (?:\S+ improved from \S+ to \S+, )?saving model to (\S.*?)\s*$")
_LIGHTNING_RE = re.compile(
    r"\bEpoch (\d+), (?:global )?step (\d+): .*?, saving model to (['\"]?)(\S.*?)\3 as top \d+\s*$")
_STRIPPED_RE = re.compile(r"Optimizer stripped from (\S.*?\.pt),(?: saved as (\S.*?\.pt),)? +\d[\d.]*MB")


def huggingface_save(text: str) -> Optional[Announcement]:
    """``Saving model checkpoint to DIR``: the step is the ``checkpoint-N`` folder's number
    (the Trainer names it after ``global_step``); the final ``save_model`` has none."""
    if "Saving model checkpoint to " not in text:
        return None
    m = _HF_RE.search(text)
    if m is None:
        return None
    path = m.group(1)
    step = _HF_STEP_RE.match(os.path.basename(path.rstrip("/")))
    return Announcement(path, int(step.group(1)) if step else None, None)


def keras_save(text: str) -> Optional[Announcement]:
    """Keras ModelCheckpoint's ``Epoch E: [... improved ..., ]saving model to PATH`` (E as printed:
    1-based since Keras 2; ``finished saving`` is printed after the save and is no announcement)."""
    if "saving model to " not in text or "finished saving" in text:
        return None
    m = _KERAS_RE.search(text)
    if m is None:
        return None
    return Announcement(m.group(2), None, int(m.group(1)))


def lightning_save(text: str) -> Optional[Announcement]:
    """Lightning's ``Epoch E, global step S: 'M' reached V (best B), saving model to 'P' as top K``;
    its 0.x ``Epoch 00001: saving model to P`` is the Keras form. ``was not in top`` is no save."""
    if "saving model to " not in text:
        return None
    m = _LIGHTNING_RE.search(text)
    if m is not None:
        return Announcement(m.group(4), int(m.group(2)), int(m.group(1)))
    return keras_save(text)


def yolo_stripped(text: str) -> Optional[Announcement]:
    """``Optimizer stripped from W.pt, 14.8MB``: W was rewritten without its optimizer before
    the line, so the file is complete; with ``W.pt, saved as S.pt, 14.8MB`` the file written is S."""
    if "Optimizer stripped from " not in text:
        return None
    m = _STRIPPED_RE.search(text)
    return Announcement(m.group(2) or m.group(1), None, None) if m else None
