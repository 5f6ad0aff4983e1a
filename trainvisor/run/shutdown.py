"""The shutdown of a run within a grace budget (`process.grace`, `--grace`), from the first
SIGTERM (or SIGINT, SIGHUP) trainvisor gets: what a preempted node has before SIGKILL.

The order is fixed: the signal forwarded (as `process.term_signal`), the child waited for,
a short wait for a checkpoint it writes on the way out, the parsing finished and every sink
flushed, the uploads drained with whatever time is left, then the exit with the child's
status. Each step has a share of the budget, as a deadline counted from the signal, so a slow
step takes time from the last one (the uploads), never from the exit. What a step had to give
up is recorded (`abandoned`): the run log and the summary list it, never silently.

A second SIGTERM, or a second SIGINT, skips to the end: the child's tree is killed (the
Supervisor does that), and nothing more is waited for.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Callable, Optional

__all__ = ["Shutdown", "FinishSignals", "CHILD_SHARE", "CHECKPOINT_SHARE", "SINKS_SHARE", "EXIT_MARGIN"]

log = logging.getLogger("trainvisor")

# Shares of the grace, as deadlines from the first signal: the child must be gone by 60% (then
# SIGKILL), its exit checkpoint settled by 70%, the sinks flushed by 80%; the uploads have the
# rest but a margin for the summary and the exit (5%, at most 2 s).
CHILD_SHARE = 0.6
CHECKPOINT_SHARE = 0.7
SINKS_SHARE = 0.8
EXIT_MARGIN = 0.05
EXIT_MARGIN_MAX = 2.0
_STARTING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Shutdown:
    """The budget of one run's shutdown: when it began, the deadline of each step, what was
    given up. `begin` is called from signal handlers (the Supervisor's, the Run's while it
    finishes): it only assigns, so it cannot deadlock the main thread it interrupts."""

    def __init__(self, grace: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace
        self.clock = clock
        self.started: Optional[float] = None
        self.signal: Optional[int] = None
        self.skipped = False
        self._seen: set[int] = set()
        self._abandoned: list[str] = []
        self._lock = threading.Lock()  # `abandon` only, never taken by `begin`

    # -- what a signal starts ----------------------------------------------------------------
    def begin(self, sig: int) -> None:
        """A shutdown signal arrived: the first starts the budget; a second SIGTERM or a second
        SIGINT skips to the end."""
        if sig not in _STARTING:
            return
        if sig in self._seen and sig != signal.SIGHUP:
            self.skipped = True
        self._seen.add(sig)
        if self.started is None:
            self.started, self.signal = self.clock(), sig

    @property
    def begun(self) -> bool:
        return self.started is not None

    # -- deadlines -----------------------------------------------------------------------------
    def child_kill_timeout(self, kill_timeout: float) -> float:
        """The Supervisor's kill timeout: the child's share of the grace, if that is shorter."""
        return min(kill_timeout, self.grace * CHILD_SHARE)

    def deadline(self, share: Optional[float] = None) -> float:
        """The absolute time a step ends by (`share` of the grace; None: the uploads', the end
        less the exit margin); +inf before the budget begins."""
        if self.started is None:
            return float("inf")
        if self.skipped:
            return self.started  # past: every later step gives up at once
        if share is None:
            return self.started + self.grace - min(EXIT_MARGIN_MAX, self.grace * EXIT_MARGIN)
        return self.started + self.grace * share

    def left(self, share: Optional[float] = None) -> float:
        """Seconds left for a step (inf before the budget begins; 0 when over)."""
        return max(0.0, self.deadline(share) - self.clock())

    def elapsed(self) -> Optional[float]:
        return None if self.started is None else self.clock() - self.started

    # -- what was given up ---------------------------------------------------------------------
    def abandon(self, what: str) -> None:
        """Record, and log, a step given up (the summary lists them)."""
        with self._lock:
            self._abandoned.append(what)
        log.warning("shutdown: %s", what)

    @property
    def abandoned(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._abandoned)

    def describe(self) -> str:
        """One line for the run log: how the shutdown went, within which budget."""
        elapsed = self.elapsed()
        if elapsed is None:
            return "no shutdown signal"
        name = signal.Signals(self.signal).name if self.signal else "?"
        how = "skipped to the end (a second signal)" if self.skipped else "in order"
        return f"shutdown after {name}: {how}, {elapsed:.1f}s of the {self.grace:g}s grace"


class FinishSignals:
    """While the run finishes (the child gone, the Supervisor's handlers restored): a SIGTERM
    starts the budget (a second skips to the end) instead of killing trainvisor mid-upload; a
    Ctrl-C stops the waiting at once, as it always did (what is left resumes on the next start).
    Main thread only (Python's rule); elsewhere nothing changes."""

    def __init__(self, shutdown: Shutdown) -> None:
        self._shutdown = shutdown
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "FinishSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self._shutdown.begin(signum)
        if signum == signal.SIGINT:
            self._shutdown.skipped = True

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()
