"""What one destination's uploads cost in time: the seconds some upload of it was in flight (its
throughput is the bytes sent over those, not over the whole run, whose training leaves the link
idle between checkpoints), and the seconds its workers waited on the rate limit."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterator

__all__ = ["UploadMeter"]


class UploadMeter:
    """Thread-safe: every upload worker reports into one meter per destination."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._active = 0
        self._since = 0.0
        self._busy = 0.0
        self._waited = 0.0

    @contextmanager
    def busy(self) -> Iterator[None]:
        """While a set uploads; overlapping sets count their shared time once."""
        with self._lock:
            if self._active == 0:
                self._since = self._clock()
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0:
                    self._busy += self._clock() - self._since

    def waited(self, seconds: float) -> None:
        with self._lock:
            self._waited += seconds

    def seconds(self) -> tuple[float, float]:
        """(seconds busy so far, an upload in flight included; seconds waited on the limiter)."""
        with self._lock:
            busy = self._busy + (self._clock() - self._since if self._active else 0.0)
            return busy, self._waited
