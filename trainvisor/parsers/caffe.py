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
from typing import ClassVar, Optional

from ..events import CheckpointEvent, Event, Metric, PHASE_TEST, PHASE_TRAIN
from ..lines import LineBlock
from . import register_parser
from .base import ParserOptions

try:  # optional C loop, built at install time when a compiler is there (setup.py)
    from ._caffe_speedups import parse_block as _c_parse_block
except ImportError:  # pragma: no cover - depends on the build
    _c_parse_block = None

__all__ = ["CaffeParser"]

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
    r"\n[IWEF](.{4} .{8})\.(.{6}) [^\]\n]*\] +(?:"
    # Iteration N [(X iter/s, Ys/M iters)][, ...], loss = L | lr = X | Testing net (#j)
    r"Iteration (\d+)(?: \(([^ )\n]+) iter/s[^)\n]*\))?,(?: [^,\n=]*,)? "
    r"(?:loss = (" + _VALUE + r")|lr = (" + _VALUE + r")|Testing net \(#(\d+)\))"
    # Train/Test net output #k: name = v
    r"|(Tr|Te)[a-z]+ net output #\d+: (\S+) = (" + _VALUE + r")"
    # Snapshotting [solver state ]to [binary proto file |HDF5 file ]PATH
    r"|Snapshotting (solver state )?to (?:binary proto file ?|HDF5 file ?)?([^\n]*?) *(?=\n|$)"
    r"|(Solving)\b)[^\n]*"
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


@register_parser
class CaffeParser:
    name: ClassVar[str] = "caffe"
    description: ClassVar[str] = (
        "Caffe glog output (BVLC, NVIDIA/DIGITS, Intel, SSD, Windows): loss, lr, net outputs, snapshots"
    )

    def __init__(self, options: ParserOptions | None = None) -> None:
        self.options = options or ParserOptions()
        year = self.options.year or datetime.date.today().year
        self._clock = _GlogClock(year)
        self._start: Optional[int] = None  # microseconds of the first "Solving" line
        self._iteration: Optional[int] = None
        self._test_iteration: Optional[int] = None
        self._test_net: Optional[int] = None
        self._ipe = self.options.iters_per_epoch
        # TRAINVISOR_PURE_PYTHON=1 forces the Python loop (tests compare both).
        self._c_loop = None if os.environ.get("TRAINVISOR_PURE_PYTHON") else _c_parse_block

    def feed(self, block: LineBlock) -> list[Event]:
        if self._c_loop is not None:
            state = [self._start, self._iteration, self._test_iteration, self._test_net]
            result = self._c_loop(block.text, block.first_line, block.wall_time, self._ipe, self._clock.cache,
                                  self._clock.base, state, Metric, _float, _int_or_none)
            if result is not NotImplemented:
                self._start, self._iteration, self._test_iteration, self._test_net = state
                events, n_checkpoints = result
                if n_checkpoints:
                    for i, ev in enumerate(events):
                        if type(ev) is tuple:
                            _, path, solver_state, line_no, iteration = ev
                            events[i] = self._checkpoint(path, solver_state, block.wall_time, line_no, iteration)
                return events
        return self._feed_python(block)

    def _feed_python(self, block: LineBlock) -> list[Event]:
        # The reference loop: _caffe_speedups.c implements exactly this for ASCII
        # blocks (tests/test_caffe_speedups.py compares the two on every log).
        text = "\n" + block.text
        out: list[Event] = []
        append = out.append
        wall = block.wall_time
        line_no = block.first_line - 1
        pos = 0
        count = text.count
        clock = self._clock
        cache_get = clock.cache.get
        new = tuple.__new__
        ipe = self._ipe
        start_t = self._start
        iteration = self._iteration
        for m in _LINE_RE.finditer(text):
            start = m.start()
            if start == pos:
                line_no += 1
            else:
                line_no += count("\n", pos, start + 1)
            pos = m.end()
            date, usec, it, speed, loss, lr, net, phase, name, val, state, path, solving = m.groups()
            base = cache_get(date)
            if base is None:
                base = clock.base(date)
            if base is not None:
                try:
                    t = base + int(usec)
                except ValueError:
                    t = None
            else:
                t = None
            if start_t is None:
                if t is None:
                    seconds = None
                else:
                    # The first "Solving" line, or (pycaffe, py-faster-rcnn print
                    # their own) the first metric line.
                    start_t = self._start = t
                    seconds = 0.0
            else:
                seconds = (t - start_t) / 1e6 if t is not None else None
            if solving is not None:
                continue
            if it is not None:
                iteration = int(it)
                epoch = iteration / ipe if ipe else None
                if loss is not None:
                    if speed is not None:
                        v = _float(speed)
                        if v is not None:
                            append(new(Metric, ("iter_per_sec", v, iteration, PHASE_TRAIN, None, seconds, epoch, wall, line_no)))
                    v = _float(loss)
                    if v is None:
                        continue
                    append(new(Metric, ("total_loss", v, iteration, PHASE_TRAIN, None, seconds, epoch, wall, line_no)))
                elif lr is not None:
                    v = _float(lr)
                    if v is None:
                        continue
                    append(new(Metric, ("lr", v, iteration, PHASE_TRAIN, None, seconds, epoch, wall, line_no)))
                else:
                    self._test_iteration = iteration
                    self._test_net = int(net)
            elif name is not None:
                v = _float(val)
                if v is None:
                    continue
                if phase == "Tr":
                    append(new(Metric, (name, v, iteration, PHASE_TRAIN, None, seconds,
                                        iteration / ipe if ipe and iteration is not None else None, wall, line_no)))
                else:
                    ti = self._test_iteration
                    append(new(Metric, (name, v, ti, PHASE_TEST, self._test_net, seconds,
                                        ti / ipe if ipe and ti is not None else None, wall, line_no)))
            else:
                append(self._checkpoint(path, state is not None, wall, line_no, iteration))
        self._iteration = iteration
        return out

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
