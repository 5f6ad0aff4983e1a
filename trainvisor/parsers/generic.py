"""The fallback: ``name=value``, ``name: value`` and JSON-lines records.

Index keys (``step``, ``iter``, ``iteration``, ``global_step``, ``epoch``) set the
record's position instead of becoming metrics; ``100/23196`` counts as 100.
Steps as other tools write them: a line of ``step``/``global_step``/``epoch`` keys
alone (``step: 200``) is the position of the records after it that give none, until
the next such line; a step in parentheses closing a line (``loss: 0.48 (100)``,
``loss: 0.48 (step 100)``, Guild AI's output scalars) is the step of that record and
of those after it. Katib's ``{metricName: accuracy, metricValue: 0.8078}`` records
are ``accuracy`` 0.8078.
In JSON records, numbers written as strings (``"loss": "0.22"``, as Katib's JSON
format and TRL write them) are numbers, and time keys (``timestamp``, ``time``,
``wall_time``) are the record's time, never metrics.
Phases come from the names, by the rule every ``key: value`` parser shares
(`common.split_phase`): ``Train Loss`` -> ``Loss``/train, ``Dev F1-macro`` ->
``F1-macro``/val, ``val_loss`` -> ``loss``/val, ``test-acc`` -> ``acc``/test.
Configuration dumps before training starts (``dropout: 0.5``, ``batch_size: 32``,
``Namespace(lr=0.1)``) are not metrics. Training has started at the first line
with a step or epoch key, a name that says it is a result (loss, accuracy, F1,
AP, ...; `_RESULT_WORDS`), or a name printed again with another value (a series,
such as ``warmup: 0``, ``warmup: 1``: its held values are then reported; a
setting printed twice, in a ``Namespace(...)`` and a dump, keeps its value). Until then
values are held, and stay held: a held name printed again with another value, also
after the start, is a series and its held value is reported then; the others were
configuration and are never reported.
Once training has started, the optional C loop (`_generic_scan.c`) reads the lines
of pairs, evaluation tables, JSON records and Katib's records; every other line comes
back to `parse_line` in order (same events; `feed` writes the block's stream into
them all, as `stamps_stream` says).
Unlike a bare ``(\\w+)=(\\S+)`` rule, ``loss = nan`` is a NaN metric and
``Train net output #1: loss = 0.3`` is named ``loss``, not ``1``; and a logger's source
location (glog's ``solver.cpp:239]``, absl's ``estimator.py:371]``) is no ``name: value`` pair.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Callable, ClassVar, NamedTuple, Optional

from ..events import PHASE_TRAIN, PHASE_VAL, Metric, with_stream
from . import register_parser
from .bars import FINISHED_TAIL, RUNNING_TAIL, BarMetrics, may_be_bar
from .base import LineParser
from .common import NUMBER, NameTable, as_float, to_float
from .tables import TABLE_MARKERS, EvalTables

try:  # the optional C line loop (setup.py); the Python one below gives the same events
    from ._generic_scan import feed as _c_feed
except ImportError:  # pragma: no cover - built without a compiler
    _c_feed = None

__all__ = ["GenericParser", "GenericScanState", "ScanEnv"]

# The extensions of the source files that loggers name with a line number (glog and absl
# ``estimator.py:371]``, ``solver.cpp:239]``, klog ``main.go:57]``): a name ending in one is a place
# in the code, never a metric's name. The C loop has the same list (_generic_grammar.h).
SOURCE_SUFFIXES = ("c", "h", "cc", "cu", "go", "hh", "py", "cpp", "cuh", "cxx", "hpp", "pyx")


def _not_a_source_file() -> str:
    """Lookbehinds refusing a name that ends in ``.`` and a SOURCE_SUFFIXES extension (one per
    length: a lookbehind has a fixed width)."""
    widths = sorted({len(x) for x in SOURCE_SUFFIXES})
    return "".join(r"(?<!\.(?:" + "|".join(x for x in SOURCE_SUFFIXES if len(x) == w) + "))" for w in widths)


# name, value, and a step in parentheses closing the line (``x: 1.1 (10)``, ``x: 1 (step 1)``, as
# Guild AI's output scalars write it). Possessive name words and blanks: a shorter name or
# fewer blanks never match where the whole run did not, and the engine need not try them.
# A source location (``estimator.py:371]``) is no pair: the name may not end in a source file's extension.
_PAIR_RE = re.compile(
    r"(?<![\w.@/-])([A-Za-z_][\w./@-]*+(?: [A-Za-z_][\w.@-]*+)?)" + _not_a_source_file()
    + r"\s*+[:=]\s*+(" + NUMBER + r")(?:/\d+)?(?![\w.:])"
    r"(?:\s+\((?:step\s+)?(\d+)\)\s*$)?"
)
# Katib's custom-filter form: ``{metricName: accuracy, metricValue: 0.8078}``, several to a line.
_KATIB_RE = re.compile(r"\{metricName: ([\w|-]+), metricValue: (" + NUMBER + r")\}")
_ITER_KEYS = frozenset({"step", "iter", "iteration", "global_step", "it", "batch", "Step", "Iter", "Iteration"})
_EPOCH_KEYS = frozenset({"epoch", "Epoch"})
# A line holding only these sets the position of the records after it, until the next one.
_STICKY_KEYS = frozenset({"step", "global_step", "Step", "epoch", "Epoch"})
# A name that says it is a result of training, not a setting.
_RESULT_WORDS = re.compile(
    r"(?:^|[^a-z])(?:loss(?:es)?|acc(?:uracy)?|err(?:or)?|f1|m?ap|ar|auc|ppl|perplexity|bleu|rouge\w*|m?iou|precision"
    r"|recall|score|dice|wer|cer|r?mse|mae|reward|top-?\d+)(?:[^a-z]|$)", re.I)
_MAX_LIST = 64
_HELD_LIMIT = 256  # names held before the start; more are configuration
_TIME_KEYS = frozenset({"timestamp", "time", "wall_time"})
_PHASE_KEYS = frozenset({"mode", "phase", "split"})
_NUMBER_TEXT = re.compile(r"\s*" + NUMBER + r"\s*")
_NAME_LIMIT = 4096  # distinct keys remembered; more (per-class APs) and the cache starts again


class GenericScanState:
    """The parser's position, shared with the C loop (read and written by name).

    `step`/`epoch`: the last ones a record gave (an evaluation table's position);
    `sticky_step`/`sticky_epoch`: set by a line of index keys alone or a step in
    parentheses, the position of the records that give none; `fast`: the C loop may
    read the next line itself (training has started)."""

    __slots__ = ("step", "epoch", "sticky_step", "sticky_epoch", "fast")

    def __init__(self) -> None:
        self.step: Optional[int] = None
        self.epoch: Optional[float] = None
        self.sticky_step: Optional[int] = None
        self.sticky_epoch: Optional[float] = None
        self.fast = False


class ScanEnv(NamedTuple):
    """What the C loop works with: the name cache and its filler, the held names (a
    record printing one is Python's), the Python line parser for the lines it hands
    back, how to build a Metric, the number fallback, the parser's evaluation tables
    (the table being read: the C loop reads and writes their fields by name); for progress
    bars, BarMetrics' state (read and written) and names, and the tail of a running value's Metric."""

    cache: dict
    held: dict
    resolve: Callable[[str], tuple]
    line: Callable
    metric_type: type
    metric_tail: tuple
    to_float: Callable[[str], Optional[float]]
    tables: EvalTables
    bar_states: dict
    bar_names: Callable[[str], tuple]
    running_tail: tuple


@register_parser
class GenericParser(LineParser):
    name: ClassVar[str] = "generic"
    description: ClassVar[str] = "fallback: name=value / name: value pairs and JSON-lines records (step/iter/epoch keys index them)"
    markers: ClassVar[tuple[str, ...]] = ("=", ":") + TABLE_MARKERS
    signature: ClassVar[str] = ""
    # Its events say the block's stream already (the C loop writes it, the Python loop's are
    # copied here): the pipeline need not look at each of them again (Pipeline.feed).
    stamps_stream: ClassVar[bool] = True

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._names = NameTable(val_prefixes=())
        self._started = False  # a step/epoch key, a result's name or a repeated name was seen
        self._held: dict[str, list[Metric]] = {}  # held before the start: name -> its value, maybe configuration
        self._tables = EvalTables()
        self._bars = BarMetrics(self._names)  # progress-bar postfixes (bars.py)
        self._pos = GenericScanState()
        self._name_cache: dict[str, tuple[str, str]] = {}
        # Metric's fields after the nine a parser gives: the C loop appends them, the block's stream first.
        self._env = ScanEnv(self._name_cache, self._held, self._resolve, self._line, Metric, FINISHED_TAIL, to_float,
                            self._tables, self._bars.states, self._bars.names, RUNNING_TAIL)
        # TRAINVISOR_PURE_PYTHON=1 forces the Python loop (tests compare both).
        self._c_feed = None if os.environ.get("TRAINVISOR_PURE_PYTHON") else _c_feed

    def feed(self, block):
        if self._c_feed is not None:
            self._sync()
            out = self._c_feed(block.text, block.first_line, block.wall_time, block.stream, self._pos, self._env)
            if out is not NotImplemented:
                return out
        out = self.feed_lines(block, self.parse_line)
        return with_stream(out, block.stream) if block.stream != "stdout" and out else out

    def _line(self, text, number, wall_time):
        """`parse_line` for a line the C loop hands back (each of its terminal states, when it was
        rewritten with \\r); then what the C loop may do next."""
        out = self.parse_states(self.parse_line, text, number, wall_time)
        self._sync()
        return out

    def _sync(self) -> None:
        """What the C loop must know of the Python side: may it read lines (the tables' state it reads itself)."""
        self._pos.fast = self._started

    def _resolve(self, key: str) -> tuple[str, str]:
        """(name, phase) of a key, remembered: ``Average loss`` -> ``loss`` (the last word names it)."""
        if len(self._name_cache) >= _NAME_LIMIT:
            self._name_cache.clear()
        name, phase = self._names(key)
        if " " in name:
            name = name.rsplit(" ", 1)[-1]
        self._name_cache[key] = hit = (name, phase)
        return hit

    def parse_line(self, text, number, wall_time):
        if may_be_bar(text) and (bar := self._bars.read(text, number, wall_time)) is not None:
            return bar
        table = self._tables.read(text, number, wall_time, self._pos.step, self._pos.epoch)
        if table is not None:
            return table
        if "=" not in text and ":" not in text:
            return None
        s = text.strip()
        if s.startswith("{") and s.endswith("}") and '"' in s:
            return self._json(s, number, wall_time)
        if "metricName" in text and (katib := _KATIB_RE.findall(text)):
            return self._record([(k, to_float(raw)) for k, raw in katib], None, None, number, wall_time)
        found = _PAIR_RE.findall(text)
        if not found:
            return None
        step = epoch = None
        items = []
        for key, raw, suffix in found:
            short = key.rsplit(" ", 1)[-1]
            if suffix and self._leads(text, found):  # "x: 1.1 (10)": this record's step and the next ones'
                step = self._pos.sticky_step = int(suffix)
            if short in _ITER_KEYS:
                v = to_float(raw)
                if v is not None and v == v and abs(v) < 1e15:
                    step = int(v)
            elif short in _EPOCH_KEYS:
                epoch = to_float(raw)
            elif (v := to_float(raw)) is not None:
                items.append((key, v))
        if not items and (step is not None or epoch is not None):
            self._stick(found, step, epoch)
        return self._record(items, step, epoch, number, wall_time)

    @staticmethod
    def _leads(text: str, found: list) -> bool:
        """The line is one pair and nothing before it, as Guild AI reads ``x: 1.1 (10)``
        (``net.cpp:127] Top shape: 64 (64)`` gives no step)."""
        return len(found) == 1 and not text[:_PAIR_RE.search(text).start()].strip()

    def _stick(self, found, step, epoch) -> None:
        """A line of index keys alone (``step: 5``, ``epoch: 2``): they are the position of
        the records after it that give none, until the next such line."""
        for key, _, _ in found:
            short = key.rsplit(" ", 1)[-1]
            if short in _STICKY_KEYS:
                if short in _EPOCH_KEYS:
                    self._pos.sticky_epoch = epoch
                else:
                    self._pos.sticky_step = step

    def _record(self, items, step, epoch, number, wall_time):
        """The metrics of one record line, or None while they may still be configuration."""
        if not self._started and step is None and epoch is None \
                and not any(_RESULT_WORDS.search(k) for k, _ in items):
            return self._before_start(items, number, wall_time)
        out = self._emit(items, step, epoch, None, number, wall_time)
        return self._series_held(items) + out if self._held else out

    def _before_start(self, items, number, wall_time):
        """Values that may be configuration: held until a name comes again with another value (a series)."""
        held = self._held
        if not any(k in held and held[k][0].value != v for k, v in items):
            if len(held) < _HELD_LIMIT:
                for key, v in items:
                    held[key] = self._emit([(key, v)], None, None, None, number, wall_time, start=False)
            return None
        return self._series_held(items) + self._emit(items, None, None, None, number, wall_time)

    def _series_held(self, items) -> list:
        """A record that prints a held name again with another value makes it a series
        (``x: 1.1`` ... ``x: 3.3``): the held values of the names it prints are reported,
        once. Held names no record prints again with another value were configuration;
        they stay held, also after the start, and are never reported."""
        held = self._held
        if not any(k in held and held[k][0].value != v for k, v in items):
            return []
        return [m for k in dict.fromkeys(k for k, _ in items) if k in held for m in held.pop(k)]

    def _emit(self, items, step, epoch, phase, number, wall_time, start=True):
        pos = self._pos
        if step is None:
            step = pos.sticky_step
        if epoch is None:
            epoch = pos.sticky_epoch
        if step is not None:
            pos.step = step
        if epoch is not None:
            pos.epoch = epoch
        self._started = self._started or start
        out = []
        cache = self._name_cache
        for key, v in items:
            name, ph = cache.get(key) or self._resolve(key)
            out.append(Metric(name, v, step, phase or ph, None, None, epoch, wall_time, number))
        return out

    def _json(self, s, number, wall_time):
        """A JSON record's metrics. json.loads gives exact types, so one `type` test per value
        tells a number, a string, a list, and what is none (bool, null, an object)."""
        try:
            rec = json.loads(s)
        except ValueError:
            return None
        if type(rec) is not dict:
            return None
        step = epoch = phase = None
        items = []
        for k, v in rec.items():
            if k in _TIME_KEYS:
                continue
            t = type(v)
            if t is float:
                f = v
            elif t is int:
                f = as_float(v)
            elif t is str:
                if k in _PHASE_KEYS:
                    phase = PHASE_VAL if v in ("val", "eval", "valid", "validation", "test") else PHASE_TRAIN
                    continue
                if _NUMBER_TEXT.fullmatch(v) is None or (f := to_float(v)) is None:
                    continue
            else:
                if t is list and len(v) <= _MAX_LIST:
                    items.extend((f"{k}/{i}", f) for i, x in enumerate(v)
                                 if type(x) in (int, float) and (f := as_float(x)) is not None)
                continue
            if k in _ITER_KEYS:
                step = int(f) if f is not None and math.isfinite(f) else None
            elif k in _EPOCH_KEYS:
                epoch = f
            elif f is not None:
                items.append((k, f))
        return self._emit(items, step, epoch, phase, number, wall_time)
