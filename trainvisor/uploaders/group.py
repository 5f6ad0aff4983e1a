"""A run's upload destinations together: one `UploadManager` per destination (its own journal
file, retries, verification, retention and orphan sweep), seen as one where the run waits on them
or shows them: one drain deadline for all, progress summed, reports merged; and each apart where
the summary lists them (`reports`).

The managers never wait on each other: each has its own pool of workers and backs off on its own
store's errors, so a destination that is down only delays its own queue. They share the run's
one rate limit (`TokenBucket`), which every manager was given when it was made."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Sequence

from .journal import JournalStates
from .outcomes import DrainReport, UploadProgress

if TYPE_CHECKING:
    from .manager import UploadManager

__all__ = ["ManagerGroup"]


class ManagerGroup:
    """`managers[i]` uploads to `urls[i]`; the first is the run's first destination (what a
    single-destination caller reads: `first`)."""

    def __init__(self, urls: Sequence[str], managers: Sequence["UploadManager"],
                 clock: Callable[[], float] = time.monotonic) -> None:
        if len(urls) != len(managers) or not managers:
            raise ValueError("one URL per manager, at least one")
        self.urls, self.managers, self._clock = tuple(urls), tuple(managers), clock

    @property
    def first(self) -> "UploadManager":
        return self.managers[0]

    def drain(self, timeout: float) -> DrainReport:
        """Wait up to `timeout` seconds in all: the managers upload side by side, so waiting for
        each in turn within one deadline waits no longer than the slowest; a manager whose store
        is down uses up what is left of the deadline, never more."""
        deadline = self._clock() + max(0.0, timeout)
        for manager in self.managers:
            manager.drain(max(0.0, deadline - self._clock()))
        return self.report()

    def reports(self) -> tuple[DrainReport, ...]:
        """Each destination's report, in `urls` order."""
        return tuple(m.report() for m in self.managers)

    def report(self) -> DrainReport:
        return merge_reports(self.reports())

    def progress(self) -> UploadProgress:
        """Bytes, files and sets summed over the destinations (a set uploaded to two counts twice:
        two uploads); seconds in flight: the longest one's (they overlap in time)."""
        ps = [m.progress() for m in self.managers]
        return UploadProgress(
            sum(p.bytes_done for p in ps), sum(p.bytes_total for p in ps), sum(p.files_done for p in ps),
            sum(p.files_total for p in ps), sum(p.files_skipped for p in ps), sum(p.bytes_skipped for p in ps),
            sum(p.sets_verified for p in ps), sum(p.sets_failed for p in ps),
            seconds=max(p.seconds for p in ps), limiter_wait=sum(p.limiter_wait for p in ps),
            sets_skipped=sum(p.sets_skipped for p in ps))

    def prune(self, *, wait: float = 0.0) -> None:
        """Retention's pass on each destination (each its own sets, by its own journal)."""
        for manager in self.managers:
            manager.prune(wait=wait)

    def close(self, timeout: float = 5.0) -> None:
        for manager in self.managers:
            manager.close(timeout)


def merge_reports(reports: Sequence[DrainReport]) -> DrainReport:
    """One report of several destinations' (each key once per destination that holds it)."""
    def joined(pick: Callable[[DrainReport], tuple]) -> tuple:
        return tuple(k for r in reports for k in pick(r))

    sets = JournalStates(joined(lambda r: r.sets.verified), joined(lambda r: r.sets.pending),
                         joined(lambda r: r.sets.failed), joined(lambda r: r.sets.skipped))
    return DrainReport(pending=joined(lambda r: r.pending), failed=joined(lambda r: r.failed),
                       verified=joined(lambda r: r.verified), sets=sets, deleted=joined(lambda r: r.deleted),
                       progress=None)
