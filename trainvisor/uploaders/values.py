"""The --best-by metric's values as the log gives them, for the retention of checkpoint sets.

`BestByValues` is an inline sink of the run (the pipeline thread writes, an upload worker asks):
it keeps only the completed records of the one metric `--best-by` names (Caffe: of its first
test net), by iteration and by epoch, the last record of a step winning (a restarted training
goes over its steps again). `value_at` answers with a frozen `SetValue`. A restarted trainvisor
`seed`s it from the run's metrics file, so the sets of an earlier attempt keep their values.
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Optional, Sequence

from ..events import Metric
from .retention import BestBy, SetValue

__all__ = ["BestByValues"]

log = logging.getLogger("trainvisor.upload")


class BestByValues:
    """Thread-safe; `close()` (the pipeline's end) says no record will come: every value is decided."""

    name = "retention"
    inline = True

    def __init__(self, best_by: BestBy) -> None:
        self.best_by = best_by
        self._lock = threading.Lock()
        self._by_iteration: dict[int, float] = {}
        self._by_epoch: dict[float, float] = {}
        self._final = False

    def write(self, events: Sequence[object]) -> None:
        for ev in events:
            if type(ev) is Metric and self._wanted(ev):
                self._add(ev)

    def _wanted(self, m: Metric) -> bool:
        """A completed value of the metric (a running one is a noisy mid-epoch value), of Caffe's
        first test net when it has several."""
        return self.best_by.matches(m.phase, m.name) and not m.running and not m.test_net

    def _add(self, m: Metric) -> None:
        with self._lock:
            if m.iteration is not None:
                self._by_iteration[m.iteration] = m.value
            if m.epoch is not None:
                self._by_epoch[m.epoch] = m.value

    def flush(self) -> None:
        pass

    def close(self) -> None:
        with self._lock:
            self._final = True

    def seed(self, path: str) -> int:
        """The records of an earlier attempt in the run's metrics file (`path`); a line cut by a
        kill or unreadable is skipped. How many records were taken."""
        taken = 0
        try:
            fh = open(path, encoding="utf-8")
        except OSError:
            return 0
        with fh:
            for line in fh:
                if self.best_by.name not in line:  # the cheap test before any JSON
                    continue
                try:
                    d = json.loads(line)
                    m = None if "event" in d else Metric.from_json_dict(d)
                except (ValueError, TypeError, KeyError):
                    continue
                if m is not None and self._wanted(m):
                    self._add(m)
                    taken += 1
        return taken

    def value_at(self, iteration: Optional[int], epoch: Optional[float]) -> SetValue:
        """The value of the record nearest at or before the set's iteration (else its epoch);
        decided once a record at or after that step came, or the log ended."""
        with self._lock:
            if iteration is not None and self._by_iteration:
                return _nearest(self._by_iteration, iteration, self._final)
            if epoch is not None and self._by_epoch:
                return _nearest(self._by_epoch, epoch, self._final)
            return SetValue(None, self._final)


def _nearest(points: dict, step: float, final: bool) -> SetValue:
    at = max((k for k in points if k <= step), default=None)
    return SetValue(None if at is None else points[at], final or max(points) >= step)
