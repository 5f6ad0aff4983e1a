"""One upload rate limit for the whole run (`--upload-rate-limit 50MB/s`): a token bucket that every
upload worker of every destination takes from, so checkpoints never saturate the node's link and
slow the training (a training that waited 20 minutes on its model uploads is what users asked
throttling for).

Fair: tokens are handed out in slices of at most `slice_bytes`, first come first served; a large
take queues again after each slice, so a small upload waits behind one slice per other waiter,
never behind a whole 8 GB file, and no upload starves. An S3 request takes its turn whole (one
part, 8 MiB by default): a waiter then waits behind at most one request per sender.

Accurate: the bucket starts empty and keeps at most `burst` seconds of tokens while nobody takes
any, so over any window of T seconds at most rate x (T + burst) bytes are granted. Where the
bytes are paid before they are sent (S3: each request waits for its tokens; s3_pace.py) that is
what reaches the network; where a store reports bytes after sending them (file://, kodo://), one
chunk or part per worker may go out ahead of its tokens.

Only the waiter at the head of the queue sleeps, and only for what its slice lacks: with an
injected clock that the injected sleep advances, a test measures exactly the time the limit costs.
"""
from __future__ import annotations

import math
import re
import threading
import time
from typing import Callable, Optional

__all__ = ["TokenBucket", "parse_rate", "RATE_FORMAT"]

RATE_FORMAT = "a rate such as 50MB/s, 800KiB/s or 1.5GB/s (0: unlimited)"
_RATE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?)(b?)(?:/s)?", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}


def parse_rate(text: "str | int | float") -> float:
    """Bytes per second from `50MB/s` (MB = 10^6 bytes, MiB = 2^20; the `B` and `/s` may be left
    out); 0 means unlimited. ValueError, one line, for anything else."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _RATE.fullmatch(str(text).strip())
        if m is None or (m.group(3) and not m.group(2)):
            raise ValueError(f"{text!r} is not {RATE_FORMAT}")
        base = 1024 if m.group(3) else 1000
        value = float(m.group(1)) * base ** _POWERS[m.group(2).lower()]
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r} is not {RATE_FORMAT}")
    return value


class TokenBucket:
    """`rate` bytes per second, shared by any number of threads. `take(n)` blocks until `n` bytes
    may go and returns the seconds it waited (for the summary's "waited on the limiter")."""

    def __init__(self, rate: float, *, burst: float = 0.1, slice_bytes: Optional[int] = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], object] = time.sleep) -> None:
        if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            raise ValueError(f"a token bucket needs a finite rate above 0 bytes/s, got {rate!r}")
        self.rate = float(rate)
        # A twentieth of a second of bytes, within [16 KiB, 1 MiB]: fine enough that a queue of
        # waiters turns over quickly, coarse enough that a handover per slice costs nothing.
        self.slice_bytes = slice_bytes or int(min(1 << 20, max(16 << 10, self.rate / 20)))
        self._capacity = max(float(self.slice_bytes), self.rate * burst)
        self._clock, self._sleep = clock, sleep
        self._tokens = 0.0  # empty at first: a run's first upload is paced from its first byte
        self._stamp = clock()
        self._cond = threading.Condition()
        self._next_ticket = self._serving = 0

    @property
    def queued(self) -> int:
        """Takers holding a ticket now: the one being served and those waiting behind it."""
        with self._cond:
            return self._next_ticket - self._serving

    def take(self, n: int, *, cancelled: Optional[Callable[[], bool]] = None, whole: bool = False) -> float:
        """Wait until `n` bytes are granted, slice by slice, in turn with the other takers.
        `cancelled`, asked between slices, ends the wait early (the caller stops its upload).
        `whole`: one turn for all `n` (a request about to be sent, at most a part: its bytes
        leave together, so the parts of one upload go out one after another at the rate rather
        than all granted at once after sharing the slices round-robin)."""
        waited = 0.0
        while n > 0 and not (cancelled is not None and cancelled()):
            piece = n if whole else min(n, self.slice_bytes)
            waited += self._take_slice(piece)
            n -= piece
        return waited

    def _take_slice(self, piece: int) -> float:
        start = self._clock()
        with self._cond:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._cond.wait_for(lambda: self._serving == ticket)
            now = self._clock()
            self._tokens = min(self._capacity, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= piece  # taken now; a debt is slept off below, by this waiter alone
            debt = -self._tokens / self.rate if self._tokens < 0 else 0.0
        try:
            if debt > 0:
                self._sleep(debt)
        finally:
            with self._cond:
                self._serving += 1
                self._cond.notify_all()
        return self._clock() - start
