"""Progress bars: one rendered state of a tqdm, rich or Keras bar read into a `BarState`,
and `BarMetrics`, which turns a stream of states into the postfix metrics a reader saw.

The forms read (one state each, as the splitter renders them):

- tqdm: ``Epoch 0:  45%|████▌     | 45/100 [00:02<00:03, 19.5it/s, loss=0.231, v_num=0]``,
  ascii bars ``|###   |``, ``desc: 45/100 [00:02<00:03, ...]`` without the percentage,
  ``desc: 45it [00:02, 19.5it/s, ...]`` without a total;
- rich (Lightning's RichProgressBar): ``Epoch 3/9 ━━━━━━━━━━ 50/50 0:00:02 • 0:00:00 25.1it/s
  v_num: 0 train_loss: 0.231``;
- Keras 3: ``50/50 ━━━━━━━━━━ 1s 10ms/step - accuracy: 0.91 - loss: 0.23`` (``=`` bars too);
- Keras 2: ``32/100 [=>....] - ETA: 1s - loss: 2.3`` and ``100/100 [====] - 1s 10ms/step - loss: ...``.

Two rules every parser that reads bars follows (generic, keras, lightning):

- **running** (`is_running`): a bar's postfix shows the values so far of the loop it counts
  (an epoch's batches); they are running values (``Metric.running``) until the bar reaches its
  total, and that loop's own values at n >= total. A bar without a total (tqdm ``45it``) never
  reaches it. The generic parser's C loop applies the same test (_generic_bars.h, `emit_bar`).
- **once a step** (`StepValues`): a value is reported once at a step. A bar drawn again at the
  same step shows its values again: Keras 3 draws its last batch's bar at the epoch's total,
  then the epoch-end line, the same bar with the same values and the ``val_*`` ones added;
  only what a redraw adds or changes is new.

A bar repeats its postfix on every redraw, so `BarMetrics` reports a state only when
its postfix values changed or the bar reached its total: never more records than
distinct bar states. (It reports a changed postfix whole, the once-a-step rule not applied
yet: its C twin builds the same records.) Bookkeeping keys (``v_num``, the rate, ``ETA``)
are never metrics.
"""
from __future__ import annotations

import re
from typing import NamedTuple, Optional

from ..events import Metric
from .common import NUMBER, NameTable, fnum, to_float

__all__ = ["BarState", "BarMetrics", "StepValues", "is_running", "read_bar", "may_be_bar"]

# tqdm's two forms, as ``^(?P<desc>.*?)<form>``: a lazy description before the form is the text
# before the first position where the form matches, which is what `search` finds (`_search_form`).
# With a percentage (``45%|...| 45/100 [...]``); its first "%|" is at most 3 digits after the start.
_TQDM_PCT_RE = re.compile(r"\d{1,3}%\|[^|]*\|\s*(?P<n>\d+)(?:/(?P<total>\d+))?\s*\[(?P<inner>[^\]]*)\]")
# Without (``45/100 [00:02<00:03, ...]``, ``45it [00:02, ...]``): only where a "[" opens the times.
_TQDM_COUNT_RE = re.compile(r"(?P<n>\d+)(?:/(?P<total>\d+)|\w*)\s*\[(?P<inner>[\d:]+(?:<[\d:?]+)?, [^\]]*/[^\]]*)\]")
_TIMES_OPEN_RE = re.compile(r"\[[\d:]")
_RICH_RE = re.compile(
    r"^(?P<desc>.*?)\s*[━╸╺─]+\s+(?P<n>\d+)/(?P<total>\d+)\s+[\d:]+\s*•\s*[-\d:]+\s*(?P<rate>\S+/s|\S+/it)?"
    r"(?P<post>.*)$")
_RICH_PAIR_RE = re.compile(r"([A-Za-z_][\w./@-]*): (" + NUMBER + r")(?!\S)")
# Keras 3's time before the time per step: the elapsed seconds (``12s``) or the ETA, in seconds
# under a minute, else ``1:06`` or ``1:02:03``.
_KERAS_RE = re.compile(
    r"^\s*(?P<n>\d+)/(?P<total>\d+)\s+(?:\[[=>.]*\]|[━=.>─╸ ]*?)\s*(?:-\s+)?"
    r"(?:ETA: \S+|(?:\d+m?s|\d+(?::\d\d){1,2})(?:\s+(?P<per>[\d.]+)(?P<unit>[mu]?s)/step)?)"
    r"(?P<post>(?:\s+-\s+.*)?)$")
_KERAS_PAIR_RE = re.compile(r" - ([A-Za-z_][\w./@-]*): (" + NUMBER + r")(?![\w.])")
_TQDM_PAIR_RE = re.compile(r"([A-Za-z_][\w./@-]*)=(" + NUMBER + r")$")
_RATE_RE = re.compile(r"(" + NUMBER + r")\s*([A-Za-z]*)/s$|(" + NUMBER + r")\s*s/([A-Za-z]+)$")
_EPOCH_RE = re.compile(r"[Ee]poch\s*\[?\s*(\d+)")
_BOOKKEEPING = frozenset({"v_num", "it/s", "s/it", "ETA", "eta"})
# A bar value's Metric fields after the nine a parser gives: the defaults, `running` set or not
# (a Metric built from its fields as one tuple: the keyword call costs 4x).
FINISHED_TAIL = tuple(Metric._field_defaults[f] for f in Metric._fields[9:])
RUNNING_TAIL = tuple(True if f == "running" else Metric._field_defaults[f] for f in Metric._fields[9:])
_new_tuple = tuple.__new__
_UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


class BarState(NamedTuple):
    """One rendered state of a progress bar. `rate`: items per second (None when the
    bar shows none yet); `postfix`: its numeric (name, value) pairs, bookkeeping left out;
    `epoch`: the number the description gives after ``Epoch``, as printed."""

    desc: str
    n: int
    total: Optional[int]
    postfix: tuple[tuple[str, float], ...]
    rate: Optional[float]
    epoch: Optional[int]


def is_running(bar: BarState) -> bool:
    """The running rule (see the module's doc): True until the bar reaches its total."""
    return bar.total is None or bar.n < bar.total


class StepValues:
    """The once-a-step rule for the bars one parser reads: which values of a state are new.
    A step is whatever tells the caller's steps apart: Keras' step counted across epochs, or
    the bar's n where nothing more is known. Holds the values of one step: bounded."""

    __slots__ = ("step", "seen")

    def __init__(self) -> None:
        self.step: object = None
        self.seen: dict[str, float] = {}

    def new(self, step: object, postfix: tuple) -> tuple:
        """The (name, value) pairs of `postfix` not reported at `step` yet: all of them at a new
        step; at the same step, those the redraw adds or changes (NaN is NaN again, not new)."""
        if step != self.step:
            self.step = step
            self.seen = dict(postfix)
            return postfix
        seen = self.seen
        fresh = tuple([(k, v) for k, v in postfix if not _same(seen.get(k), v)])
        seen.update(fresh)
        return fresh

    def forget(self) -> None:
        """A new bar starts (a new epoch): nothing it shows was reported at its steps."""
        self.step = None
        self.seen = {}


def _same(a: Optional[float], b: float) -> bool:
    return a == b or (a != a and b != b)


def may_be_bar(text: str) -> bool:
    """A cheap test a line parser runs first: False for nearly every line that is no bar
    (every form shows ``n/total`` or a rate, so a line without ``/`` costs one test)."""
    return "/" in text and ("%|" in text or "/s" in text or "/it" in text or "/step" in text or "] - " in text)


def read_bar(text: str) -> Optional[BarState]:
    """The bar `text` shows, or None when it is no progress bar. The tqdm and rich forms are
    tried only on a line holding what they cannot match without ("%|", a "[" opening the times, "•")."""
    m = _tqdm_form(text)
    if m is not None:
        return _tqdm_state(m, text)
    if "•" in text:
        m = _RICH_RE.match(text)
        if m is not None:
            pairs = tuple([(k, v) for k, raw in _RICH_PAIR_RE.findall(m.group("post"))
                           if k not in _BOOKKEEPING and (v := to_float(raw)) is not None])
            return _state(m.group("desc"), m.group("n"), m.group("total"), pairs, _rate(m.group("rate") or ""))
    m = _KERAS_RE.match(text)
    if m is not None:
        pairs = tuple([(k, v) for k, raw in _KERAS_PAIR_RE.findall(m.group("post"))
                       if k not in _BOOKKEEPING and (v := to_float(raw)) is not None])
        rate = None
        if m.group("per"):
            per = to_float(m.group("per"))
            # a per-step time so small that it is 0 s once scaled is no rate (not a division by zero)
            seconds = per * _UNIT_SECONDS[m.group("unit")] if per else None
            rate = 1.0 / seconds if seconds else None
        return _state("", m.group("n"), m.group("total"), pairs, rate)
    return None


def _tqdm_form(text: str) -> Optional[re.Match]:
    """The match of tqdm's first form that `text` shows (desc: the text before it), or None."""
    if "%|" in text:
        m = _search_form(_TQDM_PCT_RE, text, max(0, text.index("%|") - 3))
        if m is not None:
            return m
    if "[" in text and _TIMES_OPEN_RE.search(text) is not None:
        return _search_form(_TQDM_COUNT_RE, text, 0)
    return None


def _search_form(form: re.Pattern, text: str, pos: int) -> Optional[re.Match]:
    """`form` after the lazy ``^(.*?)`` of a description: its first match, unless a newline
    (which ``.`` does not cross) comes before it."""
    m = form.search(text, pos)
    if m is not None and "\n" in text[:m.start()]:
        return None
    return m


def _tqdm_state(m: re.Match, text: str) -> BarState:
    rate = None
    pairs = []
    memo = _PART_MEMO
    for part in m.group("inner").split(",")[1:]:  # after the times: the rate (a custom bar_format may leave it out), the postfix
        name, v = memo.get(part) or _tqdm_part(part)
        if name == "":
            rate = v if rate is None else rate
        elif name is not None:
            pairs.append((name, v))
    return _state(text[:m.start()], m.group("n"), m.group("total"), tuple(pairs), rate)


# A bar redraws the same description and postfix parts state after state: what they say is
# remembered (pure functions of the text; bounded like the name tables; a NaN never, since
# nan != nan makes a state with one a changed state each time).
_PART_MEMO: dict[str, tuple] = {}
_DESC_MEMO: dict[str, tuple] = {}
_MEMO_LIMIT = 4096


def _remember(memo: dict, key: str, value: tuple) -> None:
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    memo[key] = value


def _tqdm_part(raw: str) -> tuple:
    """One part of a tqdm bar's bracket after its times: (name, value) of a postfix pair,
    ("", rate) of another part (the rate, maybe None), (None, None) of one that is no metric."""
    hit = _PART_MEMO.get(raw)
    if hit is None:
        part = raw.strip()
        pm = _TQDM_PAIR_RE.match(part)
        if pm is None:
            hit = ("", _rate(part))
        elif pm.group(1) in _BOOKKEEPING or (v := to_float(pm.group(2))) is None:
            hit = (None, None)
        else:
            hit = (pm.group(1), v)
        if hit[1] == hit[1]:
            _remember(_PART_MEMO, raw, hit)
    return hit


def _state(desc: str, n: str, total: Optional[str], pairs: tuple, rate: Optional[float]) -> BarState:
    hit = _DESC_MEMO.get(desc)
    if hit is None:
        stripped = desc.strip().rstrip(":").rstrip()
        em = _EPOCH_RE.search(stripped)
        hit = (stripped, int(em.group(1)) if em else None)
        _remember(_DESC_MEMO, desc, hit)
    return BarState(hit[0], int(n), int(total) if total else None, pairs, rate, hit[1])


def _rate(text: str) -> Optional[float]:
    """Items per second from ``19.5it/s`` or ``2.11s/it`` (None for ``?it/s``). The common
    ``<digits>.<digits>it/s`` is the regex's NUMBER whole: read without it."""
    if text.endswith("it/s") and (head := text[:-4]).isascii() and head.replace(".", "", 1).isdigit():
        return float(head)
    return _rate_by_regex(text)


def _rate_by_regex(text: str) -> Optional[float]:
    m = _RATE_RE.match(text.strip())
    if m is None:
        return None
    if m.group(1) is not None:
        return to_float(m.group(1))
    per = to_float(m.group(3))
    return 1.0 / per if per else None


class BarMetrics:
    """The postfix metrics of the bars a line parser sees, one record per value of a
    changed state: iteration `n`, the description's epoch, ``running`` until n == total."""

    def __init__(self, names: NameTable) -> None:
        self.names = names
        # desc -> (postfix, done) of its last reported state; the generic parser's C loop reads
        # and writes it too (_generic_bars.h), building the same tuples
        self.states: dict[str, tuple] = {}

    def read(self, text: str, number: int, wall_time: float) -> Optional[list[Metric]]:
        """Metrics of `text` when it is a bar state ([] when nothing changed); None when it is no bar."""
        bar = read_bar(text)
        if bar is None:
            return None
        done = not is_running(bar)
        key = (bar.postfix, done)
        if not bar.postfix or self.states.get(bar.desc) == key:
            return []
        self.states[bar.desc] = key
        epoch = fnum(bar.epoch) if bar.epoch is not None else None
        names = self.names
        n = bar.n
        tail = FINISHED_TAIL if done else RUNNING_TAIL
        out = []
        for raw, value in bar.postfix:
            name, phase = names(raw)
            out.append(_new_tuple(Metric, (name, value, n, phase, None, None, epoch, wall_time, number) + tail))
        return out
