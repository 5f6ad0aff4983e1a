"""Keras / tf.keras / Keras 3: ``Epoch E/N`` then progress-bar or verbose=2 metric lines.

A progress bar (Keras 2 ``[==>..]``, Keras 3 ``━━━``, read by bars.py) is read as every bar is
(bars.py's two rules): its values are running until the bar reaches the epoch's total, and a
value is reported once at a step. The step is counted across epochs, ``(E - 1) * total + n``
(samples where Keras 2 counted samples).

At the total Keras draws the bar twice: after the last batch, then at the epoch's end (the
epoch-end line, with the ``val_*`` values added). The epoch-end line holds the epoch's values
as `History` records them; the last batch's drawing shows the same train values in Keras 3.15,
an average of the epoch's running values in older Keras 3 and tf.keras. So the bar at the total
is held until Keras is done drawing it (its next state, the next ``Epoch E/N``, a line that is
no callback's ``Epoch 3: ...`` note, the end of the output), and its values are reported once,
as last drawn, on the line of that last drawing: each value of `History` once, at its epoch and
step. An epoch of unknown length (``7/Unknown 2s ...``) has no total: its values are running.
Lines without a bar (Keras 1's ``224s - loss: ...``) hold an epoch's values.

ModelCheckpoint's ``Epoch 1: saving model to ckpt/weights.01.keras`` (printed before the save)
is a `CheckpointEvent` of kind ``keras`` with the epoch as printed, reported at once: the
watcher must know the folder before the file is written. Keras 3 and tf.keras print it before
the epoch-end line; Keras 2.2 after it, and there it comes before that held line's values."""
from __future__ import annotations

import re
from typing import ClassVar, Optional

from ..events import CheckpointEvent, Event, Metric
from . import register_parser
from .announcements import KIND_KERAS, keras_save
from .bars import BarState, StepValues, is_running, may_be_bar, read_bar
from .base import LineParser
from .common import NUMBER, NameTable, fnum, metrics_from_pairs, to_float

__all__ = ["KerasParser"]

_new_tuple = tuple.__new__  # a Metric from its fields as one tuple (the keyword call costs 4x)

_EPOCH_RE = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
# What callbacks print at an epoch's end, before the epoch-end line: ModelCheckpoint's
# "Epoch 1: saving model to ...", EarlyStopping's "Epoch 5: early stopping", ReduceLROnPlateau's.
_NOTE_RE = re.compile(r"^\s*Epoch \d+: ")
_STEP_RE = re.compile(r"^\s*(\d+)/(\d+)\b")
# Keras 3's count in an epoch whose length it does not know yet (the first, over a generator):
# "      7/Unknown 2s 25ms/step - loss: ..."; it learns the total at the epoch's end.
_UNKNOWN_RE = re.compile(r"^\s*(\d+)/Unknown ")
_KV_RE = re.compile(r" - ([A-Za-z_][\w./@-]*): (" + NUMBER + r")(?![\w.])")
_SKIP = frozenset({"ETA"})


class _AtTotal:
    """The bar at an epoch's total while Keras may still draw it again: its values (raw name ->
    value, newest), the line and time of its last drawing, its stream."""

    __slots__ = ("step", "epoch", "values", "line", "wall_time", "stream")

    def __init__(self, step: int, epoch: Optional[int], stream: str) -> None:
        self.step, self.epoch, self.stream = step, epoch, stream
        self.values: dict[str, float] = {}
        self.line = 0
        self.wall_time = 0.0


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
        self._reported = StepValues()
        # stream -> its bar at the total: only its own stream's lines finish it (a warning on
        # stderr is no Keras output), and the events a block gives are that block's stream's
        self._held: dict[str, _AtTotal] = {}
        self._stream = "stdout"  # the stream of the block being read

    def feed(self, block):
        self._stream = block.stream
        return self.feed_lines(block, self.parse_line)

    def finish(self):
        return [e for stream in list(self._held) for e in self._release(stream)]

    def parse_line(self, text, number, wall_time):
        if " - " not in text:
            if "Epoch " in text:
                m = _EPOCH_RE.match(text)
                if m:
                    out = self._release()
                    self._epoch = int(m.group(1))
                    self._reported.forget()
                    return out
                saved = keras_save(text)
                if saved is not None:
                    return [CheckpointEvent(saved.path, KIND_KERAS, None, fnum(saved.epoch), number, wall_time)]
                if _NOTE_RE.match(text):
                    return None
            return self._release() if self._held and text.strip() else None
        # Keras's bars start with their count (a tqdm bar's "k=v" postfix is no Keras value)
        if _STEP_RE.match(text) and may_be_bar(text) and (bar := read_bar(text)) is not None:
            return self._bar_values(bar, number, wall_time)
        out = self._release() if self._held else []
        found = _KV_RE.findall(text)
        return out + self._line_values(text, found, number, wall_time) if found else out

    def _line_values(self, text: str, found: list, number: int, wall_time: float) -> list[Event]:
        """The values of a line that is no bar read by bars.py: an epoch's (Keras 1's ``224s - loss:``),
        or the running values of an epoch whose length Keras does not know yet."""
        m = _UNKNOWN_RE.match(text)
        if m is not None:
            step = int(m.group(1))
            pairs = tuple([(k, v) for k, raw in found if k not in _SKIP and (v := to_float(raw)) is not None])
            return self._metrics(self._reported.new(step, pairs), step, self._epoch, number, wall_time, True)
        step = None
        m = _STEP_RE.match(text)
        if m:
            n, total = int(m.group(1)), int(m.group(2))
            step = (self._epoch - 1) * total + n if self._epoch else n
        epoch = fnum(self._epoch) if self._epoch is not None else None
        return metrics_from_pairs(found, self._names, iteration=step, epoch=epoch, seconds=None,
                                  wall_time=wall_time, line=number, skip=_SKIP)

    def _bar_values(self, bar: BarState, number: int, wall_time: float) -> list[Event]:
        """A running state's values new at its step; a state at the total held (see the module's doc)."""
        epoch = self._epoch
        step = (epoch - 1) * bar.total + bar.n if epoch and bar.total else bar.n
        held = self._held.get(self._stream)
        out: list[Event] = []
        if held is not None and held.step != step:
            out = self._release()
            held = None
        fresh = self._reported.new(step, bar.postfix)
        if is_running(bar):
            return out + self._metrics(fresh, step, epoch, number, wall_time, True)
        if held is None:
            held = self._held[self._stream] = _AtTotal(step, epoch, self._stream)
        held.values.update(fresh)
        held.line, held.wall_time = number, wall_time
        return out

    def _release(self, stream: Optional[str] = None) -> list[Event]:
        """The held bar's values, once Keras is done drawing it."""
        held = self._held.pop(stream or self._stream, None)
        if held is None:
            return []
        return self._metrics(tuple(held.values.items()), held.step, held.epoch, held.line, held.wall_time, False,
                             held.stream)

    def _metrics(self, pairs, step, epoch, line, wall_time, running, stream=None) -> list[Event]:
        names = self._names
        at = fnum(epoch) if epoch is not None else None
        stream = stream or self._stream
        out: list[Event] = []
        for key, value in pairs:
            name, phase = names(key)
            out.append(_new_tuple(Metric, (name, value, step, phase, None, None, at, wall_time, line, stream, None, running)))
        return out
