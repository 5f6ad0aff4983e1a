"""Durable record of every upload, in SQLite in the run directory.

A file goes queued -> uploading -> verified (or failed; or skipped, never sent: its set was
superseded before its upload began, `--upload-policy last`). The row keeps the size and mtime_ns the
file had when it was queued, so a file that changed is queued again rather than counted done, and
a restart on the same run directory finds what is unfinished. Each checkpoint set is recorded
too, until its manifest is verified, so a restart re-submits whole sets: manifests still come
last, and files already verified in their current version are not uploaded again.

The journal defends itself: when opened it is checked (SQLite's integrity check, its schema
version, and the run and store it belongs to, recorded on first use). A damaged or foreign
journal raises JournalError, one line naming the remedy; it is never read as "nothing to do".
`set_aside` moves one out of the way so a new one can be rebuilt from checkpoints.jsonl, the
files and the store (`trainvisor resume --rebuild-journal`).
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Optional
from urllib.parse import urlsplit

from ..checkpoints import checkpoint_from_dict, checkpoint_to_dict
from ..errors import TrainvisorError
from ..events import Checkpoint
from ..secrets import mask_url
from .deletions import DELETIONS_TABLE, DeletionsJournal

__all__ = ["Journal", "JournalEntry", "JournalError", "JournalStates", "JournalOwner", "QUEUED", "UPLOADING",
           "VERIFIED", "FAILED", "SKIPPED", "SCHEMA_VERSION", "JOURNAL_FILE", "journal_name"]

QUEUED, UPLOADING, VERIFIED, FAILED = "queued", "uploading", "verified", "failed"
# UPLOADING also means "the store may hold it already": before sending, the store is asked.
SKIPPED = "skipped"  # never sent: superseded by a newer set before its upload began (superseded.py)

SCHEMA_VERSION = 2
"""PRAGMA user_version of the journals this trainvisor writes (older ones are adopted: 1 lacks the
deletions table, made when missing)."""
JOURNAL_FILE = "uploads.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    key TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    state TEXT NOT NULL,
    checksum TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS sets (
    set_key TEXT PRIMARY KEY,
    checkpoint TEXT NOT NULL,
    state TEXT NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS owner (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
""" + DELETIONS_TABLE
_REBUILD = "run `trainvisor resume RUN_DIR --rebuild-journal` to set it aside and rebuild it"


class JournalError(TrainvisorError):
    """The upload journal cannot be trusted (damaged, newer, another run's): its one line names
    the file and the remedy. Exit code 3, as for an upload that failed."""

    exit_code = 3


@dataclass(frozen=True)
class JournalOwner:
    """What a journal belongs to: the run (its id) and the store (the destination URL)."""

    run_id: str
    store: str

    @classmethod
    def of(cls, run_id: str, url: str) -> "JournalOwner":
        """The owner for a destination URL: the store is its scheme and bucket (a file://
        store's directory), without a key prefix's slashes, a query or a password, so the same
        store written another way (`s3://b/p/`, `s3://b/p`) is the same owner."""
        try:
            parts = urlsplit(url)
        except ValueError:
            return cls(run_id, url)
        if not parts.scheme:
            return cls(run_id, url)
        where = parts.path.rstrip("/") if parts.scheme == "file" else parts.netloc.rpartition("@")[2]
        return cls(run_id, f"{parts.scheme}://{where}")



@dataclass(frozen=True)
class JournalEntry:
    key: str
    path: str
    size: int
    mtime_ns: int
    state: str
    checksum: Optional[str]
    attempts: int
    last_error: Optional[str]


@dataclass(frozen=True)
class JournalStates:
    """The journal's keys by outcome at one moment (what a drain report states)."""

    verified: tuple[str, ...]
    pending: tuple[str, ...]
    failed: tuple[str, ...]
    skipped: tuple[str, ...] = ()


def journal_name(url: str, *, several: bool) -> str:
    """The journal file of one destination in a run directory: `uploads.sqlite` when the run has
    one (the name every run directory has always had, so they resume); with several, each its
    own `uploads-<8 hex>.sqlite`, named by a hash of its masked URL: the same destination finds
    its journal again whatever order the list is in, and no password reaches a file name."""
    if not several:
        return JOURNAL_FILE
    digest = hashlib.sha256(mask_url(url.rstrip("/")).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"uploads-{digest}.sqlite"


class Journal(DeletionsJournal):
    """Thread-safe (one connection behind a lock); every change is committed before it returns.
    Retention's deletions: deletions.py."""

    def __init__(self, run_dir: str, *, owner: Optional[JournalOwner] = None, name: str = JOURNAL_FILE) -> None:
        path = Path(run_dir) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        try:
            _check(self._db, path)
            if owner is not None:
                _claim(self._db, path, owner)
        except sqlite3.DatabaseError as exc:  # "file is not a database", "disk image is malformed"
            self._db.close()
            raise JournalError(f"upload journal {path} is damaged ({exc}): {_REBUILD}") from None
        except JournalError:
            self._db.close()
            raise

    @staticmethod
    def set_aside(run_dir: str, clock: Callable[[], float] = time.time, name: str = JOURNAL_FILE) -> Optional[Path]:
        """Move the journal (and its WAL and shared memory) aside, kept for a post-mortem, so the
        next Journal starts empty; the name it was moved to, or None when there was none."""
        path = Path(run_dir) / name
        if not path.exists():
            return None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock()))
        aside = path.with_name(f"{name}.set-aside-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            if Path(f"{path}{suffix}").exists():
                os.replace(f"{path}{suffix}", f"{aside}{suffix}")
        return aside

    def queue(self, key: str, path: str, *, size: int, mtime_ns: int) -> bool:
        """Queue `path` for `key`; False when that exact version is already verified or pending."""
        with self._lock:
            row = self._db.execute("SELECT size, mtime_ns, state FROM files WHERE key=?", (key,)).fetchone()
            if row is not None and row[0] == size and row[1] == mtime_ns and row[2] not in (FAILED, SKIPPED):
                return False
            self._db.execute(
                "INSERT OR REPLACE INTO files (key, path, size, mtime_ns, state, updated)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (key, path, size, mtime_ns, QUEUED, time.time()),
            )
            return True

    def unsure(self, key: str, path: str, *, size: int, mtime_ns: int) -> None:
        """Record `key` as possibly in the store already: a restart cannot know what happened
        after the journal's last row (a kill, a WAL lost or cut), so a key the journal forgot or
        holds queued is uploaded only after the store was asked. Other states are left as is."""
        with self._lock:
            self._db.execute(
                "INSERT INTO files (key, path, size, mtime_ns, state, updated) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(key) DO UPDATE SET state=excluded.state WHERE files.state=?",
                (key, path, size, mtime_ns, UPLOADING, time.time(), QUEUED))

    def doubt(self, keys: Collection[str]) -> None:
        """The store does not hold what these verified keys say (a manifest missing): they are
        asked of the store again before anything is counted done or sent."""
        with self._lock:
            self._db.executemany("UPDATE files SET state=?, updated=? WHERE key=? AND state=?",
                                 [(UPLOADING, time.time(), k, VERIFIED) for k in keys])

    def set_state(self, set_key: str) -> Optional[str]:
        """The journaled state of one set, None when the journal does not know it."""
        with self._lock:
            row = self._db.execute("SELECT state FROM sets WHERE set_key=?", (set_key,)).fetchone()
        return None if row is None else row[0]

    def start(self, key: str) -> None:
        self._set(key, "state=?, attempts=attempts+1", (UPLOADING,))

    def verified(self, key: str, checksum: str, *, size: Optional[int] = None, mtime_ns: Optional[int] = None) -> None:
        """Record `key` verified; size and mtime_ns say which version of the file was (it may
        have changed since it was queued)."""
        if size is None or mtime_ns is None:
            self._set(key, "state=?, checksum=?, last_error=NULL", (VERIFIED, checksum))
        else:
            self._set(key, "state=?, checksum=?, size=?, mtime_ns=?, last_error=NULL",
                      (VERIFIED, checksum, size, mtime_ns))

    def retry(self, key: str, error: str) -> None:
        self._set(key, "state=?, last_error=?", (QUEUED, error))

    def failed(self, key: str, error: str) -> None:
        self._set(key, "state=?, last_error=?", (FAILED, error))

    def gone(self, key: str, path: str, error: str) -> None:
        """Record `key` failed for good although it may never have been queued (its file
        vanished before a restart could queue it), so the journal says what the report says."""
        with self._lock:
            self._db.execute(
                "INSERT INTO files (key, path, size, mtime_ns, state, last_error, updated)"
                " VALUES (?, ?, 0, 0, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET state=excluded.state,"
                " last_error=excluded.last_error, updated=excluded.updated",
                (key, path, FAILED, error, time.time()))

    def _set(self, key: str, assignments: str, values: tuple) -> None:
        with self._lock:
            self._db.execute(
                f"UPDATE files SET {assignments}, updated=? WHERE key=?", (*values, time.time(), key)
            )

    def get(self, key: str) -> Optional[JournalEntry]:
        with self._lock:
            row = self._db.execute(
                "SELECT key, path, size, mtime_ns, state, checksum, attempts, last_error"
                " FROM files WHERE key=?", (key,)
            ).fetchone()
        return JournalEntry(*row) if row else None

    def unfinished(self) -> list[JournalEntry]:
        """Entries to (re)upload after a restart: queued, or interrupted while uploading."""
        with self._lock:
            rows = self._db.execute(
                "SELECT key, path, size, mtime_ns, state, checksum, attempts, last_error"
                " FROM files WHERE state IN (?, ?) ORDER BY updated", (QUEUED, UPLOADING)
            ).fetchall()
        return [JournalEntry(*r) for r in rows]

    def verified_checksum(self, key: str, *, size: int, mtime_ns: int) -> Optional[str]:
        """The checksum of `key` if exactly this version of the file is verified, else None."""
        entry = self.get(key)
        if entry and entry.state == VERIFIED and (entry.size, entry.mtime_ns) == (size, mtime_ns):
            return entry.checksum
        return None

    def add_set(self, set_key: str, checkpoint: Checkpoint) -> None:
        """Remember a submitted set until `set_done`; a later submit of the same set replaces it
        (and a deletion of its earlier version: these objects are the store's again)."""
        record = json.dumps(checkpoint_to_dict(checkpoint))
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO sets (set_key, checkpoint, state, updated)"
                             " VALUES (?, ?, ?, ?)", (set_key, record, QUEUED, time.time()))
            self._db.execute("DELETE FROM deletions WHERE set_key=?", (set_key,))

    def set_done(self, set_key: str, state: str = VERIFIED) -> None:
        with self._lock:
            self._db.execute("UPDATE sets SET state=?, updated=? WHERE set_key=?", (state, time.time(), set_key))

    def skip(self, set_key: Optional[str], keys: Collection[str]) -> None:
        """Record a set (when given) and its queued files skipped: finished, never to be sent or
        resumed. A file another set verified or is sending meanwhile keeps its state."""
        now = time.time()
        with self._lock:
            if set_key is not None:
                self._db.execute("UPDATE sets SET state=?, updated=? WHERE set_key=?", (SKIPPED, now, set_key))
            self._db.executemany("UPDATE files SET state=?, updated=? WHERE key=? AND state=?",
                                 [(SKIPPED, now, k, QUEUED) for k in keys])

    def unfinished_sets(self) -> list[Checkpoint]:
        """Sets submitted but not finished (manifest not verified, no permanent failure)."""
        with self._lock:
            rows = self._db.execute("SELECT checkpoint FROM sets WHERE state=? ORDER BY updated",
                                    (QUEUED,)).fetchall()
        return [checkpoint_from_dict(json.loads(text)) for (text,) in rows]

    def states(self, keys: Optional[Collection[str]] = None) -> JournalStates:
        """Keys by state, as committed now (only `keys`, when given): files, and sets whose
        manifest (or, without manifests, whose first file) is not verified yet count as pending."""
        with self._lock:
            files = self._db.execute("SELECT key, state FROM files").fetchall()
            sets = self._db.execute("SELECT set_key FROM sets WHERE state=?", (QUEUED,)).fetchall()
        wanted = None if keys is None else set(keys)
        by_state: dict[str, set[str]] = {QUEUED: set(), UPLOADING: set(), VERIFIED: set(), FAILED: set()}
        for key, state in files:
            if wanted is None or key in wanted:
                by_state.setdefault(state, set()).add(key)
        done = by_state[VERIFIED] | by_state[FAILED]
        open_sets = {k for (k,) in sets if wanted is None or k in wanted}
        pending = by_state[QUEUED] | by_state[UPLOADING] | (open_sets - done)
        return JournalStates(verified=tuple(sorted(by_state[VERIFIED])), pending=tuple(sorted(pending)),
                             failed=tuple(sorted(by_state[FAILED])))

    def set_states(self, set_keys: Collection[str]) -> JournalStates:
        """Checkpoint sets by outcome: verified (every file and the manifest), failed, or pending."""
        with self._lock:
            rows = self._db.execute("SELECT set_key, state FROM sets").fetchall()
        by_state: dict[str, list[str]] = {QUEUED: [], VERIFIED: [], FAILED: [], SKIPPED: []}
        for key, state in rows:
            if key in set_keys:
                by_state.setdefault(state, []).append(key)
        return JournalStates(verified=tuple(sorted(by_state[VERIFIED])), pending=tuple(sorted(by_state[QUEUED])),
                             failed=tuple(sorted(by_state[FAILED])), skipped=tuple(sorted(by_state[SKIPPED])))

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _check(db: sqlite3.Connection, path: Path) -> None:
    """SQLite's own integrity check and the schema version; the tables made when missing."""
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    problems = [row[0] for row in db.execute("PRAGMA integrity_check(5)").fetchall()]
    if problems != ["ok"]:
        raise JournalError(f"upload journal {path} is damaged ({problems[0]}): {_REBUILD}")
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version > SCHEMA_VERSION:
        raise JournalError(f"upload journal {path} was written by a newer trainvisor (schema {version}, "
                           f"this one reads {SCHEMA_VERSION})")
    db.executescript(_SCHEMA)
    if version < SCHEMA_VERSION:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def _claim(db: sqlite3.Connection, path: Path, owner: JournalOwner) -> None:
    """Record the owner on first use; a journal of another run or store is refused: its
    'verified' rows say nothing about this run's objects."""
    wanted = {"run_id": owner.run_id, "store": owner.store}
    found = dict(db.execute("SELECT name, value FROM owner").fetchall())
    for name, value in wanted.items():
        if name not in found:
            db.execute("INSERT INTO owner (name, value) VALUES (?, ?)", (name, value))
        elif found[name] != value:
            raise JournalError(
                f"upload journal {path} belongs to run {found.get('run_id', '?')} uploading to "
                f"{mask_url(found.get('store', '?'))}, not to run {owner.run_id} uploading to "
                f"{mask_url(owner.store)}: {_REBUILD}")
