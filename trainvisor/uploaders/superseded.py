"""`--upload-policy last`: only the newest complete set matters. A set still queued when a newer
one is handed over is skipped (journaled `skipped`, counted in the summary), never sent: a "last"
checkpoint already replaced is not worth its hundreds of megabytes. A set already uploading is
finished: its bytes are on their way, and until the newer set is verified it is the newest one in
the store. The newest set is never skipped, so the store always gets the training's last state.

Newer means a later training step: a higher iteration (or epoch, when sets have no iteration),
else, when the sets cannot be compared so (no number, or one of each kind), handed to the manager
later. The watcher hands sets over as they complete, but a set it found late (written before its
directory was watched, seen at the end) must not displace the training's last state. The keys a
skipped set shares with a set still live (the same checkpoint name written again, a file shared by
sets) are left to that set: its journal rows are not marked skipped under it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Collection, Optional

from ..events import Checkpoint

__all__ = ["QueuedSet", "SupersededSets", "step_of"]

Step = Optional[tuple[str, float]]


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


class SupersededSets:
    """The sets in the manager's queue, in the order they were submitted. Thread-safe: `submitted`
    runs on the watcher's thread, `starting` and `ended` on upload workers."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._lock = threading.Lock()
        self._tickets = 0
        self._newest: tuple[Step, int] = (None, 0)  # the newest set ever submitted: its step, its ticket
        self._live: dict[int, QueuedSet] = {}

    def submitted(self, keys: Collection[str], nbytes: int, nfiles: int, step: Step = None) -> int:
        """A set was queued (`step`: `step_of` its checkpoint); its ticket."""
        with self._lock:
            self._tickets += 1
            if _newer(step, self._tickets, *self._newest):
                self._newest = (step, self._tickets)
            self._live[self._tickets] = QueuedSet(frozenset(keys), nbytes, nfiles)
            return self._tickets

    def starting(self, ticket: int) -> Optional[QueuedSet]:
        """The set's upload is about to begin: None to go on, or, when a newer set was queued
        since (and the policy skips), what to record as skipped: its keys no live set shares."""
        with self._lock:
            mine = self._live.get(ticket)
            if not self.enabled or mine is None or ticket == self._newest[1]:
                return None
            del self._live[ticket]
            shared = set().union(*(s.keys for s in self._live.values()))
            return QueuedSet(mine.keys - shared, mine.nbytes, mine.nfiles)

    def ended(self, ticket: int) -> None:
        """The set's upload ended (or it was skipped, or cancelled): it no longer holds its keys."""
        with self._lock:
            self._live.pop(ticket, None)
