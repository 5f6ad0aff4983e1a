"""detectron2: ``d2.utils.events`` iteration lines, evaluation results, checkpoints.

detectron2 prints one evaluation up to three times: the pycocotools summary
(fractions), the ``Evaluation results for bbox:`` markdown table (percent, 3
decimals), then ``copypaste:`` lines (percent, 4 decimals). It is reported once:
the tables (read by the shared `EvalTables`) are held until the ``copypaste:``
values of their task arrive, which replace the names they repeat; whatever
they do not repeat (the summary's AR values) is reported with them.

Evaluation results are filed at the iteration of the next ``iter:`` line: detectron2's
hooks run in order after a step (checkpointer, EvalHook, then PeriodicWriter), so the
evaluation after iteration N is printed before the writer's ``iter: N`` line. They are
reported with that line (live, at most one writer period later), or at the end of the
stream with the last iteration known.
"""
from __future__ import annotations

import re
from typing import ClassVar

from ..events import PHASE_TRAIN, PHASE_VAL, CheckpointEvent, Metric
from . import register_parser
from .base import LineParser
from .common import NUMBER, to_float
from .tables import TABLE_MARKERS, EvalTables

__all__ = ["Detectron2Parser"]

_ITER_RE = re.compile(r"\biter: (\d+)\s")
_KV_RE = re.compile(r"([A-Za-z_][\w./@-]*): (" + NUMBER + r")(?![\w.:])")
_CKPT_RE = re.compile(r"Saving checkpoint to (\S+?(?:_(\d+))?\.pth)\s*$")
_SKIP = frozenset({"iter"})


@register_parser
class Detectron2Parser(LineParser):
    name: ClassVar[str] = "detectron2"
    description: ClassVar[str] = "detectron2 'iter: N  total_loss: ...  lr: ...' lines, copypaste eval results, checkpoints"
    markers: ClassVar[tuple[str, ...]] = ("iter: ", "copypaste: ", "Saving checkpoint to ") + TABLE_MARKERS
    signature: ClassVar[str] = r"\biter: \d+\s+total_loss: |d2\.(?:utils\.events|engine\.\w+|checkpoint)"

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._iter: int | None = None
        self._task = ""
        self._header: list[str] = []
        self._tables = EvalTables()
        self._held: list[Metric] = []  # table values waiting for their copypaste
        self._evals: list[Metric] = []  # evaluation results waiting for the writer's iteration

    def parse_line(self, text, number, wall_time):
        out = self._parse(text, number, wall_time)
        if out is None:
            table = self._tables.read(text, number, wall_time, self._iter, None)
            if table:
                self._held.extend(table)
        return out

    def feed(self, block):
        fast = not self._held and not self._tables.may_read(block.text)  # no table line in the block
        return self.feed_lines(block, self._parse if fast else self.parse_line)

    def finish(self):
        return self._release(self._iter)

    def _release(self, iteration):
        """Every evaluation value waiting (copypaste results, tables no copypaste followed), at `iteration`."""
        waiting = self._evals + self._held
        self._evals, self._held = [], []
        return [m._replace(iteration=iteration) for m in waiting]

    def _copypaste(self, values: list[Metric]) -> list[Metric]:
        """The copypaste values, after the held table values they do not repeat."""
        names = {m.name for m in values}
        held, self._held = self._held, []
        return [m for m in held if m.name not in names] + values

    def _parse(self, text, number, wall_time):
        if "iter: " in text:
            m = _ITER_RE.search(text)
            if m is None:
                return None
            it = self._iter = int(m.group(1))
            out = self._release(it) if self._evals or self._held else []
            for key, raw in _KV_RE.findall(text, m.end()):
                v = to_float(raw)
                if v is not None:
                    out.append(Metric(key, v, it, PHASE_TRAIN, None, None, None, wall_time, number))
            return out
        if "copypaste: " in text:
            body = text.split("copypaste: ", 1)[1].strip()
            if body.startswith("Task: "):
                self._task = body[6:].strip()
                return None
            cells = body.split(",")
            values = [to_float(c) for c in cells]
            if any(v is None for v in values):
                self._header = cells
                return None
            if len(values) != len(self._header):
                return None
            prefix = self._task + "/" if self._task else ""
            self._evals.extend(self._copypaste([
                Metric(prefix + h, v, self._iter, PHASE_VAL, None, None, None, wall_time, number)
                for h, v in zip(self._header, values)
            ]))
            return []
        if "Saving checkpoint to " in text:
            m = _CKPT_RE.search(text)
            if m:
                it = int(m.group(2)) if m.group(2) else self._iter
                return [CheckpointEvent(m.group(1), "pth", it, None, number, wall_time)]
        return None
