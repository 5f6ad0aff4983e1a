"""The upload journal's record of sets deleted from the store by retention (a mixin of Journal).

A deletion is journaled `deleting` (the set, the keys its manifest lists) before the first object
is deleted and `deleted` after the last: a trainvisor killed in between finds the row at its next
start and deletes the rest (`unfinished_deletions`), so a half-deleted set is never forgotten. From
`deleting` on, the set's file rows say `deleted`: the journal no longer vouches for those objects,
so a set handed over again is uploaded whole. A set submitted again (`add_set`) drops its row.
Uses the host's `_db` and `_lock`.
"""
from __future__ import annotations

import json
import time
from typing import Collection

from ..checkpoints import checkpoint_from_dict
from ..events import Checkpoint

__all__ = ["DeletionsJournal", "DELETING", "DELETED", "DELETIONS_TABLE"]

DELETING, DELETED = "deleting", "deleted"
_VERIFIED = "verified"  # journal.VERIFIED (journal.py imports this module)

DELETIONS_TABLE = """
CREATE TABLE IF NOT EXISTS deletions (
    set_key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    keys TEXT NOT NULL,
    state TEXT NOT NULL,
    updated REAL NOT NULL
);
"""


class DeletionsJournal:
    """The deletions table's reads and writes; each change committed before it returns."""

    def begin_deletion(self, set_key: str, name: str, keys: Collection[str]) -> None:
        with self._lock, self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("INSERT OR REPLACE INTO deletions (set_key, name, keys, state, updated)"
                             " VALUES (?, ?, ?, ?, ?)", (set_key, name, json.dumps(list(keys)), DELETING, time.time()))
            self._db.executemany("UPDATE files SET state=?, updated=? WHERE key=? AND state=?",
                                 [(DELETED, time.time(), k, _VERIFIED) for k in keys])

    def end_deletion(self, set_key: str) -> None:
        """Recorded deleted, unless the set was submitted again meanwhile (its row dropped)."""
        with self._lock:
            self._db.execute("UPDATE deletions SET state=?, updated=? WHERE set_key=? AND state=?",
                             (DELETED, time.time(), set_key, DELETING))

    def unfinished_deletions(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """(set key, name, keys) of each deletion begun and not finished, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT set_key, name, keys FROM deletions WHERE state=? ORDER BY updated",
                                    (DELETING,)).fetchall()
        return [(k, n, tuple(json.loads(keys))) for k, n, keys in rows]

    def deleted_sets(self) -> tuple[str, ...]:
        """The names of the sets deleted from the store, in the order they were."""
        with self._lock:
            rows = self._db.execute("SELECT name FROM deletions WHERE state=? ORDER BY updated", (DELETED,)).fetchall()
        return tuple(n for (n,) in rows)

    def retained_sets(self) -> list[tuple[str, Checkpoint, float]]:
        """(set key, checkpoint, when verified) of every verified set no deletion has touched."""
        with self._lock:
            rows = self._db.execute(
                "SELECT s.set_key, s.checkpoint, s.updated FROM sets s LEFT JOIN deletions d ON d.set_key=s.set_key"
                " WHERE s.state=? AND d.set_key IS NULL ORDER BY s.updated", (_VERIFIED,)).fetchall()
        return [(k, checkpoint_from_dict(json.loads(text)), updated) for k, text, updated in rows]

    def all_set_files(self) -> list[tuple[str, Checkpoint]]:
        """Every set the journal knows, whatever its state (whose keys a deletion must spare)."""
        with self._lock:
            rows = self._db.execute("SELECT set_key, checkpoint FROM sets").fetchall()
        return [(k, checkpoint_from_dict(json.loads(text))) for k, text in rows]

    def is_deleted(self, set_key: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM deletions WHERE set_key=?", (set_key,)).fetchone() is not None
