"""Durable record of every upload, in SQLite in the run directory.

A file goes queued -> uploading -> verified (or failed). The row keeps the size and mtime_ns the
file had when it was queued, so a file that changed is queued again rather than counted done, and
a restart on the same run directory finds what is unfinished.
"""
from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

__all__ = ["Journal", "JournalEntry", "QUEUED", "UPLOADING", "VERIFIED", "FAILED"]

QUEUED, UPLOADING, VERIFIED, FAILED = "queued", "uploading", "verified", "failed"

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
)
"""


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


class Journal:
    """Thread-safe (one connection behind a lock); every change is committed before it returns."""

    def __init__(self, run_dir: str) -> None:
        path = Path(run_dir) / "uploads.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)

    def queue(self, key: str, path: str, *, size: int, mtime_ns: int) -> bool:
        """Queue `path` for `key`; False when that exact version is already verified or pending."""
        with self._lock:
            row = self._db.execute("SELECT size, mtime_ns, state FROM files WHERE key=?", (key,)).fetchone()
            if row is not None and row[0] == size and row[1] == mtime_ns and row[2] != FAILED:
                return False
            self._db.execute(
                "INSERT OR REPLACE INTO files (key, path, size, mtime_ns, state, updated)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (key, path, size, mtime_ns, QUEUED, time.time()),
            )
            return True

    def start(self, key: str) -> None:
        self._set(key, "state=?, attempts=attempts+1", (UPLOADING,))

    def verified(self, key: str, checksum: str) -> None:
        self._set(key, "state=?, checksum=?, last_error=NULL", (VERIFIED, checksum))

    def retry(self, key: str, error: str) -> None:
        self._set(key, "state=?, last_error=?", (QUEUED, error))

    def failed(self, key: str, error: str) -> None:
        self._set(key, "state=?, last_error=?", (FAILED, error))

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

    def close(self) -> None:
        with self._lock:
            self._db.close()
