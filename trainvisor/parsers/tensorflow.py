"""TensorFlow 1 / Estimator: ``loss = 0.69, step = 1``, ``global_step/sec: 12.3``, eval dicts,
checkpoints, ``Loss for final step: 0.0025.``

- ``Loss for final step`` (the only loss a TPUEstimator prints) is the train
  ``loss`` at the last step the log named: the latest of the ``step = N`` of a
  loss line, ``Saving checkpoints for N`` and ``Saving dict for global step N``.
- ``Saving dict for global step N: eval_accuracy = ..., loss = ...`` is one
  evaluation at step N (``eval_loss`` and the mode's own ``loss`` both name ``loss``:
  the ``eval_`` spelling wins). The ``***** Eval results *****`` block a program
  prints after it (``  eval_accuracy = 0.85``) repeats that evaluation and gives nothing.
- Duplicates: with absl logging every record is printed twice, by two handlers
  (``INFO:tensorflow:loss = ...`` and ``I0102 10:11:12.131415 140001234567890
  basic_session_run_hooks.py:262] loss = ...``), adjacent or a few lines apart.
  A record is identified by what it says (its kind, values and step) and by its
  form (``:tensorflow:`` prefix or not); one identical to a record of the *other*
  form among the last `RECENT` is the second handler's copy and is dropped (once:
  the pair is used up). Records repeated in the same form (a steady
  ``global_step/sec: 2.5``) are all kept.
"""
from __future__ import annotations

import re
from collections import deque
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
_FINAL_RE = re.compile(r"Loss for final step: (" + NUMBER + ")")
RECENT = 8  # records remembered to recognise the second handler's copy


@register_parser
class TensorFlowParser(LineParser):
    name: ClassVar[str] = "tensorflow"
    description: ClassVar[str] = "TensorFlow 1 / Estimator 'loss = X, step = N', global_step/sec, eval dicts, final-step loss, checkpoints (absl duplicates dropped)"
    markers: ClassVar[tuple[str, ...]] = ("step = ", "global_step/sec", "Saving dict for global step", "Saving checkpoints for",
                                          "Loss for final step")
    # The records, and the lines an Estimator prints before its first record (``Using config: {``,
    # ``Calling model_fn.``: a TF1 program's warnings and variable listings may fill screens
    # before that record) or a TF1 program prints through TensorFlow's logger (BERT's
    # ``***** Running training *****``, which the Hugging Face Trainer prints too, without that
    # prefix): those only with the prefix of TensorFlow's logger, or absl's of a Python file.
    signature: ClassVar[str] = (
        r"(?:INFO:tensorflow:|\] )(?:loss = \S+, step = \d+|global_step/sec: |Saving checkpoints for \d+)"
        r"|(?:^INFO:tensorflow:|^I\d{4} [\d:.]+ +\d+ [\w.-]+\.py:\d+\] )"
        r"(?:Using config: \{|(?:Done c|C)alling model_fn\.|Create CheckpointSaverHook\.|Graph was finalized\."
        r"|Starting evaluation at |Saving dict for global step \d+|Loss for final step|\*{5} \w[\w ]* \*{5})"
    )

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._step: int | None = None
        self._recent: deque = deque(maxlen=RECENT)
        self._last_step: int | None = None  # the latest step a loss, checkpoint or eval line named
        self._names = NameTable(val_prefixes=("eval_",))

    def _fresh(self, key: tuple, text: str) -> bool:
        """False for the second handler's copy of a recent record."""
        form = ":tensorflow:" in text
        other = (not form,) + key
        if other in self._recent:
            self._recent.remove(other)
            return False
        self._recent.append((form,) + key)
        return True

    def parse_line(self, text, number, wall_time):
        if "step = " in text:
            m = _LOSS_RE.search(text)
            if m and "Saving dict" not in text:
                step = self._step = self._last_step = int(m.group(3))
                v = to_float(m.group(2))
                if v is None or not self._fresh(("loss", m.group(1), m.group(2), step), text):
                    return None
                return [Metric(m.group(1), v, step, PHASE_TRAIN, None, None, None, wall_time, number)]
        if "global_step/sec" in text:
            m = _RATE_RE.search(text)
            if m and self._fresh(("rate", m.group(1), self._step), text):
                v = to_float(m.group(1))
                if v is not None:
                    return [Metric("global_step/sec", v, self._step, PHASE_TRAIN, None, None, None, wall_time, number)]
            return None
        if "Saving dict for global step" in text:
            m = _DICT_RE.search(text)
            if m and self._fresh(("eval", m.group(1), m.group(2)), text):
                step = self._last_step = int(m.group(1))
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
            if m and self._fresh(("ckpt", m.group(1)), text):
                step = self._last_step = int(m.group(1))
                return [CheckpointEvent(f"{m.group(2)}-{step}", "ckpt", step, None, number, wall_time)]
            return None
        if "Loss for final step" in text:
            m = _FINAL_RE.search(text)
            if m and self._fresh(("final", m.group(1), self._last_step), text):
                v = to_float(m.group(1))
                if v is not None:
                    return [Metric("loss", v, self._last_step, PHASE_TRAIN, None, None, None, wall_time, number)]
        return None
