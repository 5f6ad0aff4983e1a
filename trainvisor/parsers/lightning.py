"""PyTorch Lightning progress bars, as its users see them: tqdm bars and Rich bars.

- tqdm (``TQDMProgressBar``, or Lightning without rich):
  ``Epoch 1:  99%|...| 352/356 [03:04<00:02, 1.91it/s, v_num=0, train_loss=0.3, val_acc=0.227]``
- Rich (``RichProgressBar``): ``Epoch 0/2  ━━━━ 10/10 0:00:00 • 0:00:00 21.47it/s v_num: 0.000``,
  the logged values on the same line or, when they do not fit (always through a pipe), on
  indented continuation lines ``val_loss: 0.511`` below it.

Each rendered bar is one *state* (a tqdm line rewritten with ``\\r`` holds many; this parser
reads whichever states reach it, the final one or each). The postfix repeats the last values
of every metric on every state, so values are reported when they change, and where Lightning
itself files them (its ``CSVLogger`` is the reference):

- a metric whose value changes inside an epoch (before the bar's last batch) or whose name
  ends in ``_step`` is a running value: reported on each change with ``running=True``;
- the other values are per-epoch values, grouped by phase (train, val, test): a group is
  reported, whole, when any of its values changes. A group that changes in the first bar
  state after a validation bar (``Validation DataLoader 0: ...``) holds the results of that
  validation, so it is filed at the epoch and step that were validated: when only the final
  state of each ``\\r``-rewritten line is seen, that state already shows the next epoch's
  number with the previous epoch's results;
- the step is Lightning's: the 0-based index of the batch just done, counted across epochs
  (``epoch * batches + n - 1``), the ``step`` column of ``metrics.csv``.

An epoch whose printed values (rounded to 3 digits by Lightning) are all identical to the
previous epoch's cannot be told from a repeat of it, and is not reported again.
"""
from __future__ import annotations

import re
from typing import ClassVar, NamedTuple, Optional

from ..events import PHASE_TRAIN, CheckpointEvent, Metric
from . import register_parser
from .announcements import KIND_LIGHTNING, lightning_save
from .base import LineParser
from .common import NUMBER, NameTable, fnum, to_float

__all__ = ["LightningParser"]

_TQDM_RE = re.compile(r"Epoch (\d+):\s*\d+%\|[^|]*\|\s*(\d+)/(\d+) \[[^,\]]*(?:,[^,\]]*it/s|,[^,\]]*s/it)?(.*)\]")
_TQDM_KV_RE = re.compile(r"([A-Za-z_][\w./@-]*)=(" + NUMBER + r")(?![\w.])")
_RICH_RE = re.compile(r"^\s*Epoch (\d+)/\d+ +[━╸╺]* *(\d+)/(\d+|\?) (.*)$")
_RICH_KV_RE = re.compile(r"(?<![\w.@/-])([A-Za-z_][\w./@-]*): (" + NUMBER + r")(?![\w.])")
_RICH_MORE_RE = re.compile(r"^ {4,}[A-Za-z_][\w./@-]*: \S")
# Lightning's own validation bars (tqdm, Rich), not a program's "Validation loss: ..." print
_VALIDATION_RE = re.compile(r"^\s*Validation(?: DataLoader \d+)?(?::\s*(?:\d+%)?\||\s+[━╸╺])")
_SKIP = frozenset({"v_num"})
_SEEN_LIMIT = 4096


class _BarState(NamedTuple):
    """One rendered Lightning bar: the epoch and batch it shows and its (key, text) pairs."""

    epoch: int
    n: int
    total: Optional[int]
    pairs: list
    line: int
    wall_time: float
    carries_over: bool  # a tqdm bar: a new epoch's first states still show the last epoch's values

    @property
    def step(self) -> Optional[int]:
        """Lightning's global step of the batch just done (None while the bar's length is unknown)."""
        return self.epoch * self.total + self.n - 1 if self.total else None


class _Validated(NamedTuple):
    """The epoch and step a validation bar ran at: where its results are filed."""

    epoch: int
    step: Optional[int]


@register_parser
class LightningParser(LineParser):
    name: ClassVar[str] = "lightning"
    description: ClassVar[str] = "PyTorch Lightning tqdm and Rich progress bars ('Epoch N: ..%|..| i/n [..., val_acc=...]')"
    markers: ClassVar[tuple[str, ...]] = ("Epoch ",)
    signature: ClassVar[str] = r"Epoch \d+:\s*\d+%\||^\s*Epoch \d+/\d+ +[━╸╺]+ *\d+/\d+ "

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self._names = NameTable()
        self._seen: dict[str, float] = {}  # key -> the value the last state showed
        self._stepwise: set[str] = set()  # keys seen changing inside an epoch
        self._groups: dict[str, tuple] = {}  # phase -> the per-epoch values last reported
        self._bar: Optional[_BarState] = None  # the last bar state read
        self._validated: Optional[_Validated] = None  # a validation bar since that state
        self._pending: Optional[_BarState] = None  # a Rich bar waiting for its continuation lines
        self._last_pairs: list = []  # the (key, text) pairs of the last state read

    def feed(self, block):
        text = block.text
        if self._pending is None and "Epoch " not in text and "Validation" not in text:
            return []
        return super().feed(block)

    def finish(self):
        return self._flush()

    def parse_line(self, text, number, wall_time):
        if "saving model to " in text:  # ModelCheckpoint(verbose=True): printed before the file is written
            saved = lightning_save(text)
            if saved is not None:
                epoch = None if saved.epoch is None else fnum(saved.epoch)
                return self._flush() + [CheckpointEvent(saved.path, KIND_LIGHTNING, saved.iteration, epoch,
                                                        number, wall_time)]
        if "Epoch " in text:
            if "%|" in text:
                m = _TQDM_RE.search(text)
                if m is not None:
                    state = _BarState(int(m.group(1)), int(m.group(2)), int(m.group(3)),
                                      _TQDM_KV_RE.findall(m.group(4)), number, wall_time, True)
                    return self._flush() + self._read(state)
            m = _RICH_RE.match(text)
            if m is not None:
                out = self._flush()
                total = int(m.group(3)) if m.group(3) != "?" else None
                self._pending = _BarState(int(m.group(1)), int(m.group(2)), total,
                                          _RICH_KV_RE.findall(m.group(4)), number, wall_time, False)
                return out
        out = None
        if self._pending is not None:
            if _RICH_MORE_RE.match(text):
                self._pending.pairs.extend(_RICH_KV_RE.findall(text))
                return None
            out = self._flush()
        if "Validation" in text and self._bar is not None and _VALIDATION_RE.match(text):
            self._validated = _Validated(self._bar.epoch, self._bar.step)
        return out

    def _flush(self) -> list[Metric]:
        """The Rich bar held for continuation lines, now complete."""
        state, self._pending = self._pending, None
        return self._read(state) if state is not None else []

    def _read(self, state: _BarState) -> list[Metric]:
        """Metrics for the values of one bar state that are new (see the module's docstring)."""
        validated, self._validated = self._validated, None
        previous, self._bar = self._bar, state
        if validated is None and state.carries_over and previous is not None and previous.epoch < state.epoch:
            validated = _Validated(previous.epoch, previous.step)
        if state.pairs == self._last_pairs:  # most states of a bar repeat the last one's values
            return []
        self._last_pairs = state.pairs
        if len(self._seen) > _SEEN_LIMIT:
            self._seen.clear()
        inside_epoch = validated is None and state.total is not None and state.n < state.total
        out: list[Metric] = []
        groups: dict[str, list] = {}
        for key, raw in state.pairs:
            value = to_float(raw)
            if value is None or key in _SKIP:
                continue
            changed = self._seen.get(key) != value
            self._seen[key] = value
            name, phase = self._names(key)
            if phase == PHASE_TRAIN and (key in self._stepwise or key.endswith("_step") or (changed and inside_epoch)):
                self._stepwise.add(key)
                if changed:
                    out.append(Metric(name, value, state.step, phase, None, None, fnum(state.epoch),
                                      state.wall_time, state.line, running=True))
            else:
                groups.setdefault(phase, []).append((name, value))
        filed = validated or _Validated(state.epoch, state.step)
        for phase, members in groups.items():
            signature = tuple(members)
            if self._groups.get(phase) != signature:
                self._groups[phase] = signature
                out.extend(Metric(name, value, filed.step, phase, None, None, fnum(filed.epoch), state.wall_time,
                                  state.line) for name, value in members)
        return out
