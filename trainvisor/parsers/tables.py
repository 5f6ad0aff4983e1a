"""Evaluation tables that detection frameworks print, read the same way by every parser.

AP is the validation metric of every detection model, and the frameworks print it
in a handful of shapes that do not depend on the trainer around them:

- the pycocotools summary (``Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all |
  maxDets=100 ] = 0.002``, 12 lines) -> ``AP AP50 AP75 APs APm APl AR1 AR10 AR100
  ARs ARm ARl``, prefixed ``bbox/`` (``segm/``, ``keypoints/``) when the IoU type
  was printed before it (``IoU metric: bbox``, ``Evaluate annotation type *bbox*``),
  so that a Mask R-CNN's two summaries stay apart and the names agree with
  detectron2's ``bbox/AP``;
- detectron2's ``Evaluation results for bbox:`` markdown table -> ``bbox/AP`` ...;
- mmdetection's ``bbox_mAP`` values outside its epoch lines (``{'bbox_mAP': 0.358, ...}``,
  ``OrderedDict([('bbox_mAP', 0.358), ...])``) -> ``bbox_mAP`` ...;
- YOLOX's ``... the best AP is 90.00`` -> ``best_AP``; a YOLOv5/Ultralytics
  ``all  N  M  P  R  mAP50  mAP50-95`` row with no header seen -> ``P R mAP50 mAP50-95``.

All are phase ``val``; iteration and epoch are the last ones the calling parser knew.
One `EvalTables` per parser instance (it holds the table being read); `read` first
makes cheap substring checks, so a line that is none of these costs a few ``in``s.
"""
from __future__ import annotations

import re
from typing import Optional

from ..events import PHASE_VAL, Metric
from .base import LineParser
from .common import NUMBER, to_float

__all__ = ["EvalTables", "TableReadingParser", "TABLE_MARKERS", "coco_name"]

# Every line `read` takes a metric from carries one of these (parsers add them to their markers).
TABLE_MARKERS = ("] = ", "|", "mAP", "best AP is", "all ")

_COCO_RE = re.compile(
    r"Average (?:Precision|Recall)\s+\((AP|AR)\)\s*@\[\s*IoU=([\d.:]+)\s*\|\s*area=\s*(\w+)\s*"
    r"\|\s*maxDets=\s*(\d+)\s*\]\s*=\s*(" + NUMBER + ")")
_COCO_TYPE_RE = re.compile(r"IoU metric: (\w+)|Evaluate annotation type \*(\w+)\*")
_IOU_SUFFIX = {"0.50": "50", "0.75": "75", "0.5": "50"}
_AREA_SUFFIX = {"small": "s", "medium": "m", "large": "l"}
_MD_TITLE_RE = re.compile(r"Evaluation results for (\w+):\s*$")
_MMDET_RE = re.compile(r"((?:\w+/)?(?:bbox|segm|proposal)_mAP\w*)['\"]?\s*[:=,]\s*(" + NUMBER + r")(?![\w.])")
_BEST_AP_RE = re.compile(r"best AP is (" + NUMBER + ")")
_ALL_ROW_RE = re.compile(r"^\s*all\s+\d+\s+\d+\s+(" + NUMBER + r")\s+(" + NUMBER + r")\s+(" + NUMBER + r")\s+("
                         + NUMBER + r")\s*$")
_ALL_ROW_NAMES = ("P", "R", "mAP50", "mAP50-95")


def coco_name(kind: str, iou: str, area: str, max_dets: str) -> str:
    """``AP``/``AR`` + IoU (``50``, ``75``) + area (``s``, ``m``, ``l``); AR over all areas
    and IoUs carries its maxDets (``AR1``, ``AR10``, ``AR100``), as the COCO papers name them."""
    name = kind + _IOU_SUFFIX.get(iou, "" if ":" in iou else iou) + _AREA_SUFFIX.get(area, "")
    if kind == "AR" and area == "all" and ":" in iou:
        name += max_dets
    return name


class EvalTables:
    """The evaluation tables of one stream (see the module docstring)."""

    # The generic parser's C loop reads and writes these by name (_generic_tables.h): keep their types.
    __slots__ = ("_coco_type", "_md_task", "_md_head", "_md_row")

    def __init__(self) -> None:
        self._coco_type = ""
        self._md_task = ""  # "bbox" after "Evaluation results for bbox:", until the table's row
        self._md_head: list[str] = []
        self._md_row = 0  # markdown lines read after the title

    @property
    def coco_prefix(self) -> str:
        """What precedes a summary line's name: ``bbox/`` after ``IoU metric: bbox``, else nothing."""
        return self._coco_type + "/" if self._coco_type else ""

    def may_read(self, text: str) -> bool:
        """False when no line of `text` (a block) can be part of a table: one scan of
        the block instead of four per line."""
        return bool(self._md_task) or "IoU" in text or "Evaluat" in text or "AP" in text or "all " in text

    def read(self, text: str, number: int, wall_time: float, iteration: Optional[int],
             epoch: Optional[float]) -> Optional[list[Metric]]:
        """The metrics of a table line, [] for a table line that carries none (a title,
        a header), None for a line that is no part of a table (the caller reads it)."""
        if self._md_task:
            return self._markdown(text, number, wall_time, iteration, epoch)
        # Four cheap checks first: "IoU" (summary lines, "IoU metric: bbox"), "Evaluat"
        # ("Evaluate annotation type *bbox*", "Evaluation results for bbox:"), "AP", "all ".
        if "IoU" in text:
            return self._coco(text, number, wall_time, iteration, epoch)
        if "Evaluat" in text:
            return self._titles(text)
        if "AP" in text:
            if "mAP" in text:  # _MMDET_RE needs "_mAP": YOLO's "mAP50" headers cost no search
                found = _MMDET_RE.findall(text) if "_mAP" in text else []
                return self._pairs(found, number, wall_time, iteration, epoch)
            m = _BEST_AP_RE.search(text) if "best AP is" in text else None
            return self._pairs([("best_AP", m.group(1))], number, wall_time, iteration, epoch) if m else None
        if "all " in text:
            m = _ALL_ROW_RE.match(text)
            if m:
                return self._pairs(zip(_ALL_ROW_NAMES, m.groups()), number, wall_time, iteration, epoch)
        return None

    def _coco(self, text, number, wall_time, iteration, epoch) -> Optional[list[Metric]]:
        """A summary line, or the ``IoU metric: bbox`` that names the summary after it."""
        if "] = " in text:
            m = _COCO_RE.search(text)
            if m:
                v = to_float(m.group(5))
                name = coco_name(m.group(1), m.group(2), m.group(3), m.group(4))
                return [Metric(self.coco_prefix + name, v, iteration, PHASE_VAL, None, None, epoch, wall_time, number)]
            return None
        return self._titles(text) if "IoU metric: " in text else None

    def _titles(self, text) -> Optional[list[Metric]]:
        """The lines that name what comes next: [] when one is, None otherwise."""
        m = _COCO_TYPE_RE.search(text)
        if m:
            self._coco_type = m.group(1) or m.group(2)
            return []
        m = _MD_TITLE_RE.search(text)
        if m:
            self._md_task, self._md_head, self._md_row = m.group(1), [], 0
            return []
        return None

    @staticmethod
    def _pairs(found, number, wall_time, iteration, epoch) -> Optional[list[Metric]]:
        out = [Metric(k, v, iteration, PHASE_VAL, None, None, epoch, wall_time, number)
               for k, raw in found if not k.endswith("_copypaste") and (v := to_float(raw)) is not None]
        return out or None

    def _markdown(self, text, number, wall_time, iteration, epoch) -> Optional[list[Metric]]:
        """Header, ``|:---:|`` rule, one row of values; anything else ends the table."""
        s = text.strip()
        if not (s.startswith("|") and s.endswith("|")):
            self._md_task = ""
            return None
        cells = [c.strip() for c in s[1:-1].split("|")]
        self._md_row += 1
        if self._md_row == 1:
            self._md_head = cells
            return []
        if self._md_row == 2:
            return []
        task, head = self._md_task, self._md_head
        self._md_task = ""
        values = [to_float(c) for c in cells]
        if len(values) != len(head) or None in values:
            return []
        return [Metric(f"{task}/{h}", v, iteration, PHASE_VAL, None, None, epoch, wall_time, number)
                for h, v in zip(head, values)]


class TableReadingParser(LineParser):
    """A `LineParser` whose format's own lines come first (`parse_own`) and whose
    other lines are offered to the shared `EvalTables`, placed at the parser's
    last known ``_step`` / ``_epoch`` (which the subclass keeps up to date)."""

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._tables = EvalTables()
        self._step: Optional[int] = None
        self._epoch: Optional[float] = None

    def parse_own(self, text: str, number: int, wall_time: float) -> Optional[list]:
        raise NotImplementedError

    def parse_line(self, text, number, wall_time):
        out = self.parse_own(text, number, wall_time)
        if out is None:
            out = self._tables.read(text, number, wall_time, self._step, self._epoch)
        return out

    def feed(self, block):
        return self.feed_lines(block, self.parse_line if self._tables.may_read(block.text) else self.parse_own)
