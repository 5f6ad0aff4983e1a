"""PyTorch Lightning progress bars, as its users see them: tqdm bars and Rich bars.

- tqdm (``TQDMProgressBar``, or Lightning without rich):
  ``Epoch 1:  99%|...| 352/356 [03:04<00:02, 1.91it/s, v_num=0, train_loss=0.3, val_acc=0.227]``
- Rich (``RichProgressBar``, Lightning's own choice when rich is installed):
  ``Epoch 0/2  ━━━━ 10/10 0:00:00 • 0:00:00 21.47it/s v_num: 0.000 val_loss: 0.511``. Rich lays the
  bar out as one row of a table as wide as the console: when it does not fit (80 columns, every
  pipe without COLUMNS) the cells wrap onto continuation lines below the bar, each indented, the
  logged values in the last column (``val_loss: 0.511``, or ``train_loss:`` on one line and
  ``0.586`` on the next), a wrapped time or rate (``0:00:00``) in the columns before it, and a
  cell too narrow cut with ``…``. The bar and its continuation lines are read as one state:
  the values are the words left once the bar's own columns are taken out, each on the line it
  is on. Lines of another stream (or, in a saved log, another stream's lines between them) do
  not end a bar's continuation; after such a line, a continuation line must be as wide as the
  bar's first line (Rich pads every line of the row to the table's width), so that a program's
  own indented ``lr: 0.1`` printed after a bar is not read as the bar's.

Each rendered bar is one *state* (a line rewritten with ``\\r``, or a terminal redraw, holds many;
this parser reads whichever states reach it, the final one or each). The postfix repeats the last
values of every metric on every state, so values are reported when they change, and where
Lightning itself files them (its ``CSVLogger`` is the reference):

- a metric whose value changes inside an epoch (before the bar's last batch) or whose name
  ends in ``_step`` is a step value: reported on each change, ``running`` while the bar is
  before its last batch (the rule of `bars.BarMetrics`: a value at the last batch is not running);
- the other values are per-epoch values, grouped by phase (train, val, test): a group is
  reported, whole, when any of its values changes. A group that changes in the first bar
  state after a validation bar (``Validation DataLoader 0: ...``), or in a state of a later
  epoch that is still before its last batch (a bar carries the last epoch's values into the
  next), holds the results of the epoch before, so it is filed at that epoch and step;
- the step is Lightning's: the 0-based index of the batch just done, counted across epochs
  (``epoch * batches + n - 1``), the ``step`` column of ``metrics.csv``.

An epoch whose printed values (rounded to 3 digits by Lightning) are all identical to the
previous epoch's cannot be told from a repeat of it, and is not reported again.

Lightning's default Rich bar (``leave=False``) through a pipe prints one bar, the last epoch's,
when training ends: the earlier epochs' values are not in the output. The parser says so once,
with a `Notice` (`NOTICE_RICH_FINAL_ONLY`) naming the remedies, and reports the values printed.
"""
from __future__ import annotations

import re
from itertools import repeat
from typing import ClassVar, NamedTuple, Optional

from ..events import PHASE_TRAIN, CheckpointEvent, Metric, Notice
from . import register_parser
from .announcements import KIND_LIGHTNING, lightning_save
from .base import LineParser
from .common import NUMBER, NameTable, fnum, to_float

_new_tuple = tuple.__new__

__all__ = ["LightningParser", "NOTICE_RICH_FINAL_ONLY"]

NOTICE_RICH_FINAL_ONLY = "lightning-rich-final-only"
_FINAL_ONLY_MESSAGE = ("Lightning's Rich progress bar printed only the last epoch's values (through a pipe it draws "
                       "no other epoch): run with --pty, use Lightning's TQDMProgressBar, or follow its metrics.csv "
                       "(--follow 'lightning_logs/*/metrics.csv')")

_TQDM_RE = re.compile(r"Epoch (\d+):\s*\d+%\|[^|]*\|\s*(\d+)/(\d+) \[[^,\]]*(?:,[^,\]]*it/s|,[^,\]]*s/it)?(.*)\]")
_TQDM_KV_RE = re.compile(r"([A-Za-z_][\w./@-]*)=(" + NUMBER + r")(?![\w.])")
_RICH_RE = re.compile(r"^\s*Epoch (\d+)/(\d+) +[━╸╺]* *(\d+)/(\d+|\?)(?: (.*))?$")
# The words of a Rich bar's row: a value's name (`val_loss:`), a number, or the bar's own columns
# (times, the separator, the rate, the bar, a count, and any word a narrow cell cut with `…`).
_NAME, _NUMBER, _CHROME = 1, 2, 3
_RICH_WORD_RE = re.compile(r"(?P<name>[A-Za-z_][\w./@-]*:)|(?P<number>" + NUMBER + r")"
                           r"|(?:[\d-]+:[\d-]{2}:[\d-]{2}|•|(?:[\d.]+|\?)(?:it/s|s/it)|[━╸╺]+|\d+/(?:\d+|\?)|.*….*)")
_WORD_KINDS: dict[str, Optional[int]] = {}  # word -> its kind (None: no word of a bar), bounded
# The values of a bar's line alone (no continuation line): the same pairs, found in one pass.
_RICH_KV_RE = re.compile(r"(?<!\S)([A-Za-z_][\w./@-]*): (" + NUMBER + r")(?!\S)")
# Lightning's own validation bars (tqdm, Rich), not a program's "Validation loss: ..." print
_VALIDATION_RE = re.compile(r"^\s*Validation(?: DataLoader \d+)?(?::\s*(?:\d+%)?\||\s+[━╸╺])")
_SKIP = frozenset({"v_num"})
_SEEN_LIMIT = 4096
# Lines that may come between a Rich bar and its last continuation line in a saved log (another
# stream's lines: `Trainer.fit` stopped, a warning); past these the bar is complete.
_FOREIGN_LIMIT = 8


class _BarState(NamedTuple):
    """One rendered Lightning bar: the epoch and batch it shows, its (key, text) values and the
    line each is on (`lines`; None: all on the bar's `line`)."""

    epoch: int
    n: int
    total: Optional[int]
    pairs: list
    lines: Optional[list]
    line: int
    wall_time: float
    stream: str
    last_epoch: Optional[int]  # a Rich bar's "Epoch 2/2": the last epoch the training runs (None: tqdm)

    @property
    def step(self) -> Optional[int]:
        """Lightning's global step of the batch just done (None while the bar's length is unknown)."""
        return self.epoch * self.total + self.n - 1 if self.total else None


class _Validated(NamedTuple):
    """The epoch and step a validation bar ran at: where its results are filed."""

    epoch: int
    step: Optional[int]


def _word_kind(word: str) -> Optional[int]:
    """`_NAME`, `_NUMBER`, `_CHROME`, or None for a word no bar prints. A bar's words repeat from
    state to state (names, times, the separator), so each is classified once."""
    kind = _WORD_KINDS.get(word, 0)
    if kind == 0:
        m = _RICH_WORD_RE.fullmatch(word)
        kind = None if m is None else _NAME if m.group("name") else _NUMBER if m.group("number") else _CHROME
        if len(_WORD_KINDS) >= _SEEN_LIMIT:
            _WORD_KINDS.clear()
        _WORD_KINDS[word] = kind
    return kind


class _RichRow:
    """A Rich bar's first line and the continuation lines read so far (one per stream)."""

    __slots__ = ("head", "width", "rest", "words", "foreign")

    def __init__(self, head: _BarState, width: int, rest: str) -> None:
        self.head = head
        self.width = width  # the first line's: every line of the row is padded to it
        self.rest = rest  # the first line after the count
        self.words: Optional[list] = None  # (word, kind, line) of all lines, once a continuation came
        self.foreign = 0  # lines since the bar that were not its continuation

    def continues(self, text: str, number: int) -> bool:
        """Whether `text` (indented) is a continuation line of this bar: all its words are a
        bar's (a wrapped value or column); if so they are kept."""
        if self.foreign and len(text) != self.width:
            return False
        words = self._words(text, number)
        if any(kind is None for _, kind, _ in words):
            return False
        if self.words is None:
            self.words = self._words(self.rest, self.head.line)
        self.words.extend(words)
        return True

    @staticmethod
    def _words(text: str, line: int) -> list:
        kinds = _WORD_KINDS
        return [(w, k if (k := kinds.get(w, 0)) != 0 else _word_kind(w), line) for w in text.split()]

    def state(self) -> _BarState:
        """The bar with the values of all its lines (a name, then a number, the bar's own columns
        left out), each with the line its number is on."""
        if self.words is None:  # the bar's line alone (a wide console; most redraws on a terminal)
            return _new_tuple(_BarState, self.head[:3] + (_RICH_KV_RE.findall(self.rest), None) + self.head[5:])
        values = [word for word in self.words if word[1] != _CHROME]
        pairs, lines = [], []
        for (name, kind, _), (raw, next_kind, line) in zip(values, values[1:]):
            if kind == _NAME and next_kind == _NUMBER:
                pairs.append((name[:-1], raw))
                lines.append(line)
        return _new_tuple(_BarState, self.head[:3] + (pairs, lines) + self.head[5:])


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
        self._rows: dict[str, _RichRow] = {}  # stream -> its Rich bar waiting for continuation lines
        self._last_pairs: list = []  # the (key, text) values of the last state read
        self._stream = "stdout"  # the stream of the block being read

    def feed(self, block):
        text = block.text
        self._stream = block.stream
        if block.stream not in self._rows and "Epoch " not in text and "Validation" not in text:
            return []
        return super().feed(block)

    def finish(self):
        out = []
        for stream in sorted(self._rows):
            out.extend(self._flush(stream))
        return out

    def parse_line(self, text, number, wall_time):
        stream = self._stream
        row = self._rows.get(stream)
        if row is not None and text.startswith("    ") and row.continues(text, number):
            return None
        if "saving model to " in text:  # ModelCheckpoint(verbose=True): printed before the file is written
            saved = lightning_save(text)
            if saved is not None:
                epoch = None if saved.epoch is None else fnum(saved.epoch)
                return self._flush(stream) + [CheckpointEvent(saved.path, KIND_LIGHTNING, saved.iteration, epoch,
                                                              number, wall_time, stream)]
        if "Epoch " in text:
            if "%|" in text and (m := _TQDM_RE.search(text)) is not None:
                state = _new_tuple(_BarState, (int(m.group(1)), int(m.group(2)), int(m.group(3)),
                                               _TQDM_KV_RE.findall(m.group(4)), None, number, wall_time, stream, None))
                return self._read(state) if row is None else self._flush(stream) + self._read(state)
            out = self._rich_bar(text, number, wall_time, stream)
            if out is not None:
                return out
        out = None
        if row is not None:
            row.foreign += 1
            if row.foreign > _FOREIGN_LIMIT:
                out = self._flush(stream)
        if "Validation" in text and _VALIDATION_RE.match(text):
            out = (out or []) + self._flush(stream)  # a Rich display's validation row comes after the bar's
            if self._bar is not None:
                self._validated = _Validated(self._bar.epoch, self._bar.step)
        return out

    def _rich_bar(self, text: str, number: int, wall_time: float, stream: str) -> Optional[list]:
        """A Rich bar's first line: held for its continuation lines (the events of the bar it
        completes); None when `text` is no such line."""
        m = _RICH_RE.match(text)
        if m is None:
            return None
        out = self._flush(stream)
        total = int(m.group(4)) if m.group(4) != "?" else None
        head = _BarState(int(m.group(1)), int(m.group(3)), total, [], None, number, wall_time, stream, int(m.group(2)))
        self._rows[stream] = _RichRow(head, len(text), m.group(5) or "")
        return out

    def _flush(self, stream: str) -> list:
        """The Rich bar of `stream` held for continuation lines, now complete."""
        row = self._rows.pop(stream, None)
        return self._read(row.state()) if row is not None else []

    @staticmethod
    def _final_only(state: _BarState) -> list:
        """The Notice when the first bar read (`state`) is a Rich bar's last epoch, finished: printed
        at the end through a pipe, so no earlier epoch's values are in the output."""
        if (state.last_epoch is not None and 0 < state.epoch == state.last_epoch
                and state.total is not None and state.n >= state.total):
            return [Notice(NOTICE_RICH_FINAL_ONLY, _FINAL_ONLY_MESSAGE, state.line, state.wall_time, state.stream)]
        return []

    def _read(self, state: _BarState) -> list:
        """Events for the values of one bar state that are new (see the module's docstring)."""
        previous = self._bar
        out = self._final_only(state) if previous is None else []
        validated, self._validated = self._validated, None
        self._bar = state
        total = state.total
        before_last_batch = total is not None and state.n < total
        # A later epoch's bar carries the last epoch's values until its own are in: a tqdm line's
        # states, or a Rich display's redraws before its last batch (a Rich bar at its last batch
        # after one of an earlier epoch is the final bar printed through a pipe: its own values).
        if (validated is None and previous is not None and previous.epoch < state.epoch
                and (before_last_batch or state.last_epoch is None)):
            validated = _Validated(previous.epoch, previous.step)
        pairs = state.pairs
        if pairs == self._last_pairs:  # most states of a bar repeat the last one's values
            return out
        self._last_pairs = pairs
        if len(self._seen) > _SEEN_LIMIT:
            self._seen.clear()
        running = validated is None and before_last_batch
        groups = self._step_values(state, running, out)
        filed = validated or _Validated(state.epoch, state.step)
        for phase, members in groups.items():
            signature = tuple((name, value) for name, value, _ in members)
            if self._groups.get(phase) != signature:
                self._groups[phase] = signature
                epoch, tail = fnum(filed.epoch), (state.stream, None, False)
                out.extend(_new_tuple(Metric, (name, value, filed.step, phase, None, None, epoch, state.wall_time, line)
                                      + tail) for name, value, line in members)
        return out

    def _step_values(self, state: _BarState, running: bool, out: list) -> dict[str, list]:
        """The step values of `state` that changed, appended to `out`; the others by phase."""
        seen, names, stepwise = self._seen, self._names, self._stepwise
        step, epoch, tail = state.step, fnum(state.epoch), (state.stream, None, running)
        groups: dict[str, list] = {}
        for (key, raw), line in zip(state.pairs, state.lines or repeat(state.line)):
            value = to_float(raw)
            if value is None or key in _SKIP:
                continue
            changed = seen.get(key) != value
            seen[key] = value
            name, phase = names(key)
            if phase == PHASE_TRAIN and (key in stepwise or key.endswith("_step") or (changed and running)):
                stepwise.add(key)
                if changed:
                    out.append(_new_tuple(Metric, (name, value, step, phase, None, None, epoch, state.wall_time, line)
                                          + tail))
            else:
                groups.setdefault(phase, []).append((name, value, line))
        return groups
