"""`--upload-policy last`: only the newest complete set matters. A set still queued when a newer
one is handed over is skipped (journaled `skipped`, counted in the summary), never sent: a "last"
checkpoint already replaced is not worth its hundreds of megabytes. A set already uploading is
finished: its bytes are on their way, and until the newer set is verified it is the newest one in
the store. The newest set is never skipped, so the store always gets the training's last state.

Retention (`--keep-last`, `--keep-best`) skips the same way a queued set it would delete as soon
as it is verified: when the set is about to be sent, the policy is applied to it together with
the newer sets already handed over (queued, uploading or verified), by retention's own ranking
(`Pruner.skip_reason`, on `select_deletions`); a set it would not keep is skipped. A set whose
--best-by value is not known yet is undecided, so kept: never skipped on a guess.

Newer means a later training step: a higher iteration (or epoch, when sets have no iteration),
else, when the sets cannot be compared so (no number, or one of each kind), handed to the manager
later. The watcher hands sets over as they complete, but a set it found late (written before its
directory was watched, seen at the end) must not displace the training's last state. The keys a
skipped set shares with a set still live (the same checkpoint name written again, a file shared by
sets) are left to that set: its journal rows are not marked skipped under it.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection, Optional, Sequence

from ..events import Checkpoint

if TYPE_CHECKING:
    from .pruning import Handed

__all__ = ["QueuedSet", "SupersededSets", "step_of", "SUPERSEDED"]

log = logging.getLogger("trainvisor.upload")

Step = Optional[tuple[str, float]]
SUPERSEDED = "a newer one was complete before its upload began"
RetentionCheck = Callable[["Handed", Sequence["Handed"]], Optional[str]]
"""`Pruner.skip_reason`: why retention would delete a set at once, or None."""


def step_of(cp: Checkpoint) -> Step:
    """Where in the training a set was written: ("iteration", n), else ("epoch", e), else None."""
    if cp.iteration is not None:
        return ("iteration", float(cp.iteration))
    return None if cp.epoch is None else ("epoch", float(cp.epoch))


def _newer(step: Step, ticket: int, than_step: Step, than_ticket: int) -> bool:
    if step is not None and than_step is not None and step[0] == than_step[0] and step[1] != than_step[1]:
        return step[1] > than_step[1]
    return ticket > than_ticket


@dataclass(frozen=True)
class QueuedSet:
    """What a submitted set put in the queue: its object keys (files and manifest) and its size."""

    keys: frozenset[str]
    nbytes: int
    nfiles: int
    why: str = SUPERSEDED
    """Why it is skipped (the log line's reason)."""
    handed: Optional[tuple[str, Checkpoint]] = None
    """Its set key and checkpoint, what retention ranks (None: not given, never judged by it)."""


class SupersededSets:
    """The sets in the manager's queue, in the order they were submitted. Thread-safe: `submitted`
    runs on the watcher's thread, `starting` and `ended` on upload workers. `enabled`:
    `--upload-policy last`; `retention`: the run's `Pruner.skip_reason` (None: no retention)."""

    def __init__(self, enabled: bool, retention: Optional[RetentionCheck] = None) -> None:
        self.enabled, self._retention = enabled, retention
        self._lock = threading.Lock()
        self._tickets = 0
        self._newest: tuple[Step, int] = (None, 0)  # the newest set ever submitted: its step, its ticket
        self._live: dict[int, QueuedSet] = {}

    def submitted(self, keys: Collection[str], nbytes: int, nfiles: int, step: Step = None, *,
                  checkpoint: Optional[Checkpoint] = None, set_key: str = "") -> int:
        """A set was queued (`step`: `step_of` its checkpoint; `checkpoint` and its `set_key`, for
        retention); its ticket."""
        with self._lock:
            self._tickets += 1
            if _newer(step, self._tickets, *self._newest):
                self._newest = (step, self._tickets)
            handed = (set_key, checkpoint) if checkpoint is not None else None
            self._live[self._tickets] = QueuedSet(frozenset(keys), nbytes, nfiles, handed=handed)
            return self._tickets

    def starting(self, ticket: int) -> Optional[QueuedSet]:
        """The set's upload is about to begin: None to go on, or, when a newer set was queued
        since (and the policy skips) or retention would delete it at once, what to record as
        skipped: its keys no live set shares."""
        with self._lock:
            mine = self._live.get(ticket)
            if mine is None or ticket == self._newest[1] or not (self.enabled or self._retention):
                return None
            queued = [(*s.handed, t) for t, s in self._live.items() if t != ticket and s.handed is not None]
        why = SUPERSEDED if self.enabled else self._retention_says(ticket, mine.handed, queued)
        if why is None:
            return None
        with self._lock:
            del self._live[ticket]  # skipped: handed over no longer
            shared = set().union(*(s.keys for s in self._live.values()))
            return QueuedSet(mine.keys - shared, mine.nbytes, mine.nfiles, why)

    def _retention_says(self, ticket: int, handed: Optional[tuple[str, Checkpoint]],
                        queued: Sequence["Handed"]) -> Optional[str]:
        """Outside the lock: the check reads the journal and the manifests."""
        if handed is None or self._retention is None:
            return None
        try:
            return self._retention((handed[0], handed[1], ticket), queued)
        except Exception:  # a bug, a journal closed under it: sent rather than skipped on a failure
            log.exception("retention's check of checkpoint %s before its upload failed: it is uploaded", handed[1].name)
            return None

    def ended(self, ticket: int) -> None:
        """The set's upload ended (or it was skipped, or cancelled): it no longer holds its keys."""
        with self._lock:
            self._live.pop(ticket, None)
