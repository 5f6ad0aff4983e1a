"""Caffe (BVLC and forks: NVIDIA/DIGITS, Intel, SSD, Windows) glog output.

One combined, MULTILINE regex runs over a whole `LineBlock`: lines that carry no
metric are rejected inside the regex engine and never reach Python code, which is
what makes this parser faster than per-line matching. Only glog lines count
(``I0827 10:27:16.124927 28582 solver.cpp:250] ...``), so pycaffe prints, shell
errors and the like never produce metrics.

Metric names: ``total_loss`` for the (smoothed) ``Iteration N, loss = L`` value,
``lr``, ``iter_per_sec``, and every ``Train net output`` / ``Test net output`` by
its own name (``loss``, ``accuracy``, ``mbox_loss`` ...). Test outputs carry the
iteration and test-net index of the preceding ``Iteration N, Testing net (#j)``.
"""
from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass
from typing import Callable, ClassVar, Optional

from ..events import CheckpointEvent, Event, LineBlock, Metric, PHASE_TEST, PHASE_TRAIN
from . import register_parser
from .base import ParserOptions

try:  # optional C loop, built at install time when a compiler is there (setup.py)
    from ._caffe_scan import parse_block as _c_parse_block
except ImportError:  # pragma: no cover - depends on the build
    _c_parse_block = None

__all__ = ["CaffeParser", "CaffeScanState", "ScanEnv"]

# A character class, not an alternation (measured: the alternation cost a third
# of the whole scan); float() validates, and a value it rejects yields no metric
# unless it is one of MSVC's spellings (1.#QNAN, -1.#IND, 1.#INF).
_VALUE = r"[-+0-9.eEnaifNAIF#QD]+"

# Anchored on the "\n" that ends the previous line rather than with ^ and
# MULTILINE: the engine then jumps from newline to newline instead of trying
# every character position (measured: about twice as fast). `feed` puts a "\n"
# before the block so its first line matches too. Each alternative ends by
# consuming the rest of its line, so consecutive metric lines are contiguous
# matches and need no newline counting.
_LINE_RE = re.compile(
    r"[\n\r][IWEF](.{4} .{8})\.(.{6}) [^\]\n\r]*\] +(?:"
    # Iteration N [(X iter/s, Ys/M iters)][, ...], loss = L | lr = X | Testing net (#j)
    r"Iteration (\d+)(?: \(([^ )\n\r]+) iter/s[^)\n\r]*\))?,(?: [^,\n\r=]*,)? "
    r"(?:loss = (" + _VALUE + r")|lr = (" + _VALUE + r")|Testing net \(#(\d+)\))"
    # Train/Test net output #k: name = v
    r"|(Tr|Te)[a-z]+ net output #\d+: (\S+) = (" + _VALUE + r")"
    # Snapshotting [solver state ]to [binary proto file |HDF5 file ]PATH
    r"|Snapshotting (solver state )?to (?:binary proto file ?|HDF5 file ?)?([^\n\r]*?) *(?=[\n\r]|$)"
    r"|(Solving)\b)[^\n\r]*"
)
_ITER_IN_PATH = re.compile(r"_iter_(\d+)")
_GLOG_DATE = re.compile(r"(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)$")


def _int_or_none(text: str) -> Optional[int]:
    try:
        return int(text)
    except ValueError:
        return None


def _float(text: str) -> Optional[float]:
    """float(), plus MSVC's NaN/infinity spellings; None for what is no number."""
    try:
        return float(text)
    except ValueError:
        if "1.#" in text:
            v = float("inf") if "INF" in text else float("nan")
            return -v if text.startswith("-") and "INF" in text else v
        return None


_new = tuple.__new__


def _append(out: list, name: str, value: Optional[float], iteration: Optional[int], phase: str,
            test_net: Optional[int], seconds: Optional[float], epoch: Optional[float], wall: float,
            line: int) -> None:
    """A Metric for a value that is a number; text that is none gives no metric. Every field is
    given (stream, rank, running: their defaults), as the C scanner gives them."""
    if value is not None:
        out.append(_new(Metric, (name, value, iteration, phase, test_net, seconds, epoch, wall, line,
                                 "stdout", None, False)))


class _GlogClock:
    """Seconds between glog timestamps, which carry no year.

    The year starts at `year` and advances when the month goes backwards, so a
    run across New Year never gets negative seconds. Results are cached per
    second-resolution timestamp: most lines of a block share one. Times are
    integer microseconds, so differences are exact.
    """

    def __init__(self, year: int) -> None:
        self.year = year
        self._origin = datetime.date(year, 1, 1).toordinal()
        self._last_month = 0
        self.cache: dict[str, int] = {}

    def base(self, date: str) -> Optional[int]:
        """Microseconds of a whole-second glog date ('MMDD HH:MM:SS'); None if impossible."""
        m = _GLOG_DATE.match(date)
        if m is None:
            return None
        month, day, hh, mm, ss = (int(g) for g in m.groups())
        if not (1 <= month <= 12 and 1 <= day <= 31 and hh < 24 and mm < 60 and ss < 61):
            return None
        if month < self._last_month:
            self.year += 1
            self.cache.clear()
        self._last_month = month
        try:
            ordinal = datetime.date(self.year, month, day).toordinal()
        except ValueError:
            # Feb 29 in a year we guessed wrong, or a day the month lacks.
            ordinal = datetime.date(self.year, month, 1).toordinal() + day - 1
        base = ((ordinal - self._origin) * 86400 + hh * 3600 + mm * 60 + ss) * 1_000_000
        if len(self.cache) > 4096:
            self.cache.clear()
        self.cache[date] = base
        return base


class CaffeScanState:
    """Where the parse stands between blocks; the C scanner reads and writes these fields by name.

    `start`: microseconds of the first timed line ("Solving", or the first metric
    line of logs that print no "Solving"); `iteration`: the last "Iteration N";
    `test_iteration`/`test_net`: those of the last "Iteration N, Testing net (#j)".
    """

    __slots__ = ("start", "iteration", "test_iteration", "test_net")

    def __init__(self) -> None:
        self.start: Optional[int] = None
        self.iteration: Optional[int] = None
        self.test_iteration: Optional[int] = None
        self.test_net: Optional[int] = None


@dataclass(frozen=True)
class ScanEnv:
    """What the C scanner calls back into, by name: the clock, the event types, the
    number fallbacks for text its fast paths do not take."""

    iters_per_epoch: Optional[int]
    cache: dict
    base: Callable[[str], Optional[int]]
    metric: type
    float_fallback: Callable[[str], Optional[float]]
    int_fallback: Callable[[str], Optional[int]]
    checkpoint: Callable[..., CheckpointEvent]


@register_parser
class CaffeParser:
    name: ClassVar[str] = "caffe"
    description: ClassVar[str] = (
        "Caffe glog output (BVLC, NVIDIA/DIGITS, Intel, SSD, Windows): loss, lr, net outputs, snapshots"
    )
    # glog lines only: this parser reads nothing else
    signature: ClassVar[str] = (
        r"^[IWEF]\d{4} [\d:.]+ +\d+ (?:solver|caffe|net|sgd_solver|layer_factory)\.(?:cpp|hpp):\d+\]"
    )
    markers: ClassVar[tuple[str, ...]] = ("] ",)

    def __init__(self, options: ParserOptions | None = None) -> None:
        self.options = options or ParserOptions()
        year = self.options.year or datetime.date.today().year
        self._clock = _GlogClock(year)
        self._state = CaffeScanState()
        self._ipe = self.options.iters_per_epoch
        self._env = ScanEnv(self._ipe, self._clock.cache, self._clock.base, Metric, _float, _int_or_none,
                            self._checkpoint)
        # TRAINVISOR_PURE_PYTHON=1 forces the Python loop (tests compare both).
        self._c_loop = None if os.environ.get("TRAINVISOR_PURE_PYTHON") else _c_parse_block

    def feed(self, block: LineBlock) -> list[Event]:
        if self._c_loop is not None:
            events = self._c_loop(block.text, block.first_line, block.wall_time, block.stream, self._env, self._state)
            if events is not NotImplemented:
                return events
        return self._feed_python(block)

    def _feed_python(self, block: LineBlock) -> list[Event]:
        # The reference loop: _caffe_scan.c implements exactly this for ASCII
        # blocks (tests/test_caffe_speedups.py compares the two on every log).
        text = "\n" + block.text
        out: list[Event] = []
        wall = block.wall_time
        line_no = block.first_line - 1
        pos = 0
        count = text.count
        on_line = self._on_line
        for m in _LINE_RE.finditer(text):
            start = m.start()
            if start == pos:
                if text[start] == "\n":  # a \r starts another state of the same line
                    line_no += 1
            else:
                line_no += count("\n", pos, start + 1)
            pos = m.end()
            on_line(m.groups(), wall, line_no, out)
        stream = block.stream
        if stream == "stdout":
            return out
        return [_new(Metric, ev[:9] + (stream,) + ev[10:]) if type(ev) is Metric else ev for ev in out]

    def _seconds(self, date: str, usec: str) -> Optional[float]:
        """Seconds since the first timed line, which becomes the start; None without a valid time."""
        clock = self._clock
        base = clock.cache.get(date)
        if base is None:
            base = clock.base(date)
        t = None
        if base is not None:
            try:
                t = base + int(usec)
            except ValueError:
                pass
        state = self._state
        if state.start is None:
            if t is None:
                return None
            state.start = t
            return 0.0
        return (t - state.start) / 1e6 if t is not None else None

    def _on_line(self, groups: tuple, wall: float, line_no: int, out: list[Event]) -> None:
        """The events of one metric line (the groups of _LINE_RE), appended to `out`."""
        date, usec, it, speed, loss, lr, net, phase, name, val, solver_state, path, solving = groups
        seconds = self._seconds(date, usec)
        if solving is not None:
            return
        state = self._state
        ipe = self._ipe
        if it is not None:
            iteration = state.iteration = int(it)
            epoch = iteration / ipe if ipe else None
            if loss is not None:
                if speed is not None:
                    _append(out, "iter_per_sec", _float(speed), iteration, PHASE_TRAIN, None, seconds, epoch, wall,
                            line_no)
                _append(out, "total_loss", _float(loss), iteration, PHASE_TRAIN, None, seconds, epoch, wall, line_no)
            elif lr is not None:
                _append(out, "lr", _float(lr), iteration, PHASE_TRAIN, None, seconds, epoch, wall, line_no)
            else:
                state.test_iteration = iteration
                state.test_net = int(net)
        elif name is not None:
            if phase == "Tr":
                it_n, phase_name, test_net = state.iteration, PHASE_TRAIN, None
            else:
                it_n, phase_name, test_net = state.test_iteration, PHASE_TEST, state.test_net
            epoch = it_n / ipe if ipe and it_n is not None else None
            _append(out, name, _float(val), it_n, phase_name, test_net, seconds, epoch, wall, line_no)
        else:
            out.append(self._checkpoint(path, solver_state is not None, wall, line_no, state.iteration))

    def _checkpoint(self, path: str, solver_state: bool, wall: float, line_no: int,
                    current_iteration: Optional[int]) -> CheckpointEvent:
        m = _ITER_IN_PATH.search(path)
        iteration = int(m.group(1)) if m else current_iteration
        ipe = self._ipe
        return CheckpointEvent(
            path=path,
            kind="solverstate" if solver_state else "weights",
            iteration=iteration,
            epoch=iteration / ipe if ipe and iteration is not None else None,
            line=line_no,
            wall_time=wall,
        )

    def finish(self) -> list[Event]:
        return []
