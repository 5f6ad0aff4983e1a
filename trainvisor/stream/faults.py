"""Containment for trainvisor's own faults: a failing hook, sink or parser is logged,
counted, and never reaches the training."""
from __future__ import annotations

import logging
from collections import Counter

__all__ = ["FaultCounter"]


class FaultCounter:
    """Counts failures per component; logs the first with its traceback (an error: on the
    terminal too), then the count at 10, 100, 1000 ... as information (the run log only), so a
    hook failing on every line floods neither; the summary gives the totals."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.counts: Counter[str] = Counter()
        self._total = 0  # an int, so another thread reads it without walking a changing dict

    def record(self, component: str, exc: BaseException) -> None:
        self.counts[component] += 1
        self._total += 1
        n = self.counts[component]
        if n == 1:
            self.logger.error("%s failed: %s: %s", component, type(exc).__name__, exc, exc_info=exc)
        elif _is_power_of_ten(n):
            self.logger.info("%s has failed %d times; last: %s: %s", component, n, type(exc).__name__, exc)

    @property
    def total(self) -> int:
        return self._total


def _is_power_of_ten(n: int) -> bool:
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1
