"""Plain PyTorch prints: the MNIST/CIFAR examples, torchvision/DETR MetricLogger, timm.

- ``Train Epoch: 1 [640/60000 (1%)]\\tLoss: 2.3``, ``Test set: Average loss: 0.03, Accuracy: 9890/10000 (99%)``
  (the MNIST example). The line counts samples, restarting each epoch, and says nothing of the
  batch size; the step reported is the samples seen since training began,
  ``(epoch - first) * dataset size + samples``, with ``first`` 1 (the example's numbering) or 0
  when the log has an epoch 0, so curves of successive epochs follow each other. The test
  set's values keep the program's word (phase ``test``) and the step of the end of the epoch.
- ``[1,  2000] loss: 2.190`` (CIFAR-10 tutorial)
- ``Epoch: [0]  [ 10/128]  eta: ...  lr: 0.0001  loss: 55.79 (56.16) ...`` and ``Test:  [3/4] ...``
  (the ``Test:`` lines' ``[3/4]`` counts test batches: their values are placed at the step and
  epoch of the last training line, as a validation is)
- timm: ``Train: 3 [ 100/390 ( 26%)]  Loss: 3.1 (3.3)  ...  LR: 1.0e-03`` / ``Test: [ 78/78]  Loss: ... Acc@1: ...``
"""
from __future__ import annotations

import re
from typing import ClassVar, Optional

from ..events import PHASE_TEST, PHASE_TRAIN, PHASE_VAL, Metric
from . import register_parser
from .common import NUMBER, fnum, to_float
from .tables import TABLE_MARKERS, TableReadingParser

__all__ = ["PyTorchParser"]

_MNIST_TRAIN = re.compile(r"Train Epoch: (\d+) \[(\d+)/(\d+)[^\]]*\]\s*Loss: (" + NUMBER + ")")
_MNIST_TEST = re.compile(r"Test set: Average loss: (" + NUMBER + r"), Accuracy: (\d+)/(\d+)")
_CIFAR = re.compile(r"\[(\d+),\s*(\d+)\] loss: (" + NUMBER + ")")
_LOGGER = re.compile(r"(Epoch: \[(\d+)\]|Train: (\d+)|Test:)\s*\[\s*(\d+)/(\d+)[^\]]*\]")
_KV = re.compile(r"([A-Za-z_][\w.@/-]*): +(" + NUMBER + r")(?![\w.:])")
_SKIP = frozenset({"eta", "time", "data", "mem", "data_time", "iter_time"})


@register_parser
class PyTorchParser(TableReadingParser):
    name: ClassVar[str] = "pytorch"
    description: ClassVar[str] = "plain PyTorch example prints, torchvision/DETR MetricLogger and timm train/test lines"
    markers: ClassVar[tuple[str, ...]] = ("Epoch:", "] loss:", "Test", "Train:") + TABLE_MARKERS
    signature: ClassVar[str] = (
        r"Train Epoch: \d+ \[\d+/|Test set: Average loss:|^.*\[\d+,\s*\d+\] loss: [\d.]"
        r"|Epoch: \[\d+\]\s+\[\s*\d+/\d+\]|^Train: \d+ \[\s*\d+/\d+|^Test:\s+\[\s*\d+/\d+\]"
    )

    # _step / _epoch (TableReadingParser): the last training line's, where a COCO summary is placed

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._first_epoch: Optional[int] = None  # the MNIST lines' first epoch number: 0 or 1
        self._epoch_end: Optional[int] = None  # the MNIST step at the end of the current epoch

    def parse_own(self, text, number, wall_time):
        if "Epoch" in text:
            if "Train Epoch:" in text:
                m = _MNIST_TRAIN.search(text)
                return self._mnist_train(m, number, wall_time) if m else None
            if "Epoch: [" in text:
                return self._logger(text, number, wall_time)
        if "] loss:" in text:
            m = _CIFAR.search(text)
            if m:
                v = to_float(m.group(3))
                return [Metric("loss", v, int(m.group(2)), PHASE_TRAIN, None, None, float(m.group(1)), wall_time, number)]
            return None
        if "Test" in text:
            if "Test set:" in text:
                m = _MNIST_TEST.search(text)
                if m:
                    ep, step = self._epoch, self._epoch_end
                    acc = int(m.group(2)) / max(int(m.group(3)), 1)
                    return [
                        Metric("loss", to_float(m.group(1)), step, PHASE_TEST, None, None, ep, wall_time, number),
                        Metric("accuracy", acc, step, PHASE_TEST, None, None, ep, wall_time, number),
                    ]
                return None
            if "Test:" in text:
                return self._logger(text, number, wall_time)
        if "Train:" in text:
            return self._logger(text, number, wall_time)
        return None

    def _mnist_train(self, m: re.Match, number: int, wall_time: float) -> list[Metric]:
        """A ``Train Epoch:`` line, its step counted in samples across epochs (see the module's docstring)."""
        epoch, samples, size = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if self._first_epoch is None:
            self._first_epoch = 0 if epoch == 0 else 1
        done = (epoch - self._first_epoch) * size
        self._epoch_end = done + size
        ep = self._epoch = fnum(epoch)
        step = self._step = done + samples
        return [Metric("loss", to_float(m.group(4)), step, PHASE_TRAIN, None, None, ep, wall_time, number)]

    def _logger(self, text, number, wall_time):
        m = _LOGGER.search(text)
        if m is None:
            return None
        n, total = int(m.group(4)), int(m.group(5))
        if m.group(1) == "Test:":
            # the counter is the test batch's; the values belong to the training's step, where
            # the COCO summary that follows is placed too
            phase, step, epoch = PHASE_VAL, self._step, self._epoch
        else:
            ep = int(m.group(2) or m.group(3))
            phase, step, epoch = PHASE_TRAIN, ep * total + n, fnum(ep)
            self._step, self._epoch = step, epoch
        out = []
        for key, raw in _KV.findall(text, m.end()):
            name = key.lower()
            if name in _SKIP:
                continue
            v = to_float(raw)
            if v is not None:
                out.append(Metric(name, v, step, phase, None, None, epoch, wall_time, number))
        return out
