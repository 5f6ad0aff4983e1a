"""What the upload manager hands out and takes: its retry policy, a drain's report, a set's
outcome, the progress so far, and the error that cancels an upload in flight at close.
(Apart from manager.py so the manager stays one screenful of logic; imported from there too.)"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional

from .base import UploadError
from .journal import JournalStates

__all__ = ["DrainReport", "RetryPolicy", "SetOutcome", "UploadCancelled", "UploadProgress"]


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter. Retryable errors are retried up to `attempts` times,
    by default without limit: an outage of the store must not lose a checkpoint, and at exit
    `--drain-timeout` bounds the wait (what is left is journaled and resumed next time)."""

    attempts: Optional[int] = None
    base: float = 0.5
    cap: float = 30.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        # 2 ** attempt past 1023 no longer converts to a float: a store down for hours at the cap
        # would make the retry loop raise instead of waiting (the cap is long reached by then).
        return rng.uniform(0, min(self.cap, self.base * 2 ** min(attempt, 64)))


@dataclass(frozen=True)
class DrainReport:
    """What the journal says when drain returns, by key: not yet verified (queued, uploading, or
    a set whose manifest is not verified), failed for good, and verified."""

    pending: tuple[str, ...]
    failed: tuple[str, ...] = field(default=())
    verified: tuple[str, ...] = field(default=())
    sets: JournalStates = field(default=JournalStates((), (), ()))
    """The same for whole checkpoint sets (by set key), which is what a person counts."""
    deleted: tuple[str, ...] = field(default=())
    """The names of the sets retention deleted from the store (in this run directory, ever)."""
    progress: Optional["UploadProgress"] = field(default=None, compare=False)
    """The manager's counts then: bytes sent, seconds in flight, rate, waits on the rate limit (a
    snapshot of counters, not of the journal: left out when reports are compared)."""


@dataclass(frozen=True)
class SetOutcome:
    """What a submitted set's future resolves to: its set key and its journal state
    (`verified`, `failed`, or `queued` when the manager stopped before it finished)."""

    set_key: str
    state: str


class UploadCancelled(UploadError):
    """Raised from the progress callback once the manager is closing: the uploader stops at its
    next chunk or part, its resume record kept, so exit is not held up by a large upload."""

    def __init__(self) -> None:
        super().__init__("cancelled: trainvisor is stopping", retryable=True)


@dataclass(frozen=True)
class UploadProgress:
    """Bytes and files so far, over everything submitted (a resumed file counts from its start)."""

    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    files_skipped: int = 0
    """Files found already verified in their current version (not uploaded again)."""
    bytes_skipped: int = 0
    """Their bytes: counted in `bytes_done` (the progress bar's whole), never sent."""
    sets_verified: int = 0
    sets_failed: int = 0
    """Checkpoint sets whose upload ended, verified or failed for good, in this manager's life."""
    seconds: float = 0.0
    """Seconds during which some upload was in flight (the link idles between checkpoints)."""
    limiter_wait: float = 0.0
    """Seconds the uploads waited on the rate limit (summed over workers: may exceed `seconds`)."""
    sets_skipped: int = 0
    """Sets never sent: a newer one was queued before their upload began (`--upload-policy last`),
    or retention would have deleted them as soon as they were verified (superseded.py)."""

    @property
    def files_sent(self) -> int:
        return self.files_done - self.files_skipped

    @property
    def bytes_sent(self) -> int:
        return self.bytes_done - self.bytes_skipped

    @property
    def rate(self) -> float:
        """Bytes sent per second of upload time (0 before any)."""
        return self.bytes_sent / self.seconds if self.seconds > 0 else 0.0
