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
import re
from typing import ClassVar, Optional

from ..events import CheckpointEvent, Event, Metric, PHASE_TEST, PHASE_TRAIN
from ..lines import LineBlock
from . import register_parser
from .base import ParserOptions

__all__ = ["CaffeParser"]

_VALUE = r"[-+]?(?:[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|[0-9]+\.|nan|inf|NaN|Inf|INF|NAN|-?1\.#(?:QNAN|IND|INF)0*)"

_GLOG = (
    r"^[IWEF](?P<date>\d{4} \d\d:\d\d:\d\d)\.(?P<usec>\d{6}) +\d+ [^\]\n]*\] +"
)
_LINE_RE = re.compile(
    _GLOG
    + r"(?:"
    # Iteration N [(X iter/s, Ys/M iters)], loss = L | lr = X | Testing net (#j)
    + r"Iteration (?P<it>\d+)(?: \((?P<speed>[^ )]+) iter/s[^)\n]*\))?,(?: [^,\n=]*,)? "
    + r"(?:loss = (?P<loss>" + _VALUE + r")|lr = (?P<lr>" + _VALUE + r")|Testing net \(#(?P<net>\d+)\))"
    # Train/Test net output #k: name = v
    + r"|(?P<phase>Tr|Te)[a-z]+ net output #\d+: (?P<name>\S+) = (?P<val>" + _VALUE + r")"
    # Snapshotting [solver state ]to [binary proto file |HDF5 file ]PATH
    + r"|Snapshotting (?P<state>solver state )?to (?:binary proto file ?|HDF5 file ?)?(?P<path>[^\n]+?)\s*$"
    + r"|(?P<solving>Solving)\b"
    + r")",
    re.MULTILINE,
)
_ITER_IN_PATH = re.compile(r"_iter_(\d+)")
_GLOG_DATE = re.compile(r"(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)$")


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        # MSVC prints NaN as 1.#QNAN / -1.#IND and infinity as 1.#INF.
        return float("inf") if "INF" in text else float("nan")


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
        self._cache: dict[str, float] = {}

    def absolute(self, date: str, usec: str) -> Optional[int]:
        """Microseconds since Jan 1 of the first year (an int: exact differences)."""
        base = self._cache.get(date)
        if base is None:
            base = self._absolute_base(date)
            if base is None:
                return None
        return base + int(usec)

    def _absolute_base(self, date: str) -> Optional[int]:
        m = _GLOG_DATE.match(date)
        if m is None:
            return None
        month, day, hh, mm, ss = (int(g) for g in m.groups())
        if not (1 <= month <= 12 and 1 <= day <= 31 and hh < 24 and mm < 60 and ss < 61):
            return None
        if month < self._last_month:
            self.year += 1
            self._cache.clear()
        self._last_month = month
        try:
            ordinal = datetime.date(self.year, month, day).toordinal()
        except ValueError:
            # Feb 29 in a year we guessed wrong, or a day the month lacks.
            ordinal = datetime.date(self.year, month, 1).toordinal() + day - 1
        base = ((ordinal - self._origin) * 86400 + hh * 3600 + mm * 60 + ss) * 1_000_000
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[date] = base
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

    def feed(self, block: LineBlock) -> list[Event]:
        text = block.text
        if "] " not in text:
            return []
        out: list[Event] = []
        append = out.append
        wall = block.wall_time
        line_no = block.first_line
        pos = 0
        count = text.count
        clock = self._clock
        new_metric = tuple.__new__
        ipe = self._ipe
        for m in _LINE_RE.finditer(text):
            start = m.start()
            line_no += count("\n", pos, start)
            pos = start
            date, usec, it, speed, loss, lr, net, phase, name, val, state, path, solving = m.groups()
            t = clock.absolute(date, usec)
            if solving is not None:
                if self._start is None and t is not None:
                    self._start = t
                continue
            start_t = self._start
            if start_t is None and t is not None:
                # No glog "Solving" line (pycaffe / py-faster-rcnn print their
                # own): count from the first metric line instead.
                start_t = self._start = t
            seconds = (t - start_t) / 1e6 if (t is not None and start_t is not None) else None
            if it is not None:
                iteration = int(it)
                epoch = iteration / ipe if ipe else None
                if net is not None:
                    self._test_iteration = iteration
                    self._test_net = int(net)
                    self._iteration = iteration
                    continue
                if loss is not None:
                    self._iteration = iteration
                    if speed is not None:
                        append(new_metric(Metric, ("iter_per_sec", _float(speed), iteration, PHASE_TRAIN, None, seconds, epoch, wall, line_no)))
                    append(new_metric(Metric, ("total_loss", _float(loss), iteration, PHASE_TRAIN, None, seconds, epoch, wall, line_no)))
                else:
                    append(new_metric(Metric, ("lr", _float(lr), iteration, PHASE_TRAIN, None, seconds, epoch, wall, line_no)))
            elif name is not None:
                if phase == "Tr":
                    iteration = self._iteration
                    append(new_metric(Metric, (name, _float(val), iteration, PHASE_TRAIN, None, seconds,
                                               iteration / ipe if ipe and iteration is not None else None, wall, line_no)))
                else:
                    iteration = self._test_iteration
                    append(new_metric(Metric, (name, _float(val), iteration, PHASE_TEST, self._test_net, seconds,
                                               iteration / ipe if ipe and iteration is not None else None, wall, line_no)))
            else:
                append(self._checkpoint(path, state is not None, wall, line_no))
        return out

    def _checkpoint(self, path: str, solver_state: bool, wall: float, line_no: int) -> CheckpointEvent:
        m = _ITER_IN_PATH.search(path)
        iteration = int(m.group(1)) if m else self._iteration
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
