"""Small per-key JSON records of uploads in progress, so an attempt can resume an earlier one.

Kept in memory and, given a folder (in the run directory), on disk as one file per key written
atomically (temp + rename): a crash leaves either the old record or the new one, never half.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from typing import Optional

__all__ = ["ResumeRecords"]


class ResumeRecords:
    def __init__(self, folder: Optional[str]) -> None:
        self.folder = folder
        self._memory: dict[str, dict] = {}
        self._lock = threading.Lock()

    def _path(self, key: str) -> Optional[str]:
        if self.folder is None:
            return None
        return os.path.join(self.folder, hashlib.sha1(key.encode()).hexdigest() + ".json")

    def get(self, key: str) -> Optional[dict]:
        with self._lock:
            if key in self._memory:
                return self._memory[key]
        path = self._path(key)
        if path is None:
            return None
        try:
            with open(path) as f:
                record = json.load(f)
        except (OSError, ValueError):  # none, or unreadable: start over rather than guess
            return None
        return record if isinstance(record, dict) and record.get("key") == key else None

    def put(self, key: str, record: dict) -> None:
        record = {**record, "key": key}
        with self._lock:
            self._memory[key] = record
        path = self._path(key)
        if path is not None:
            os.makedirs(self.folder, exist_ok=True)  # type: ignore[arg-type]
            tmp = f"{path}.{threading.get_ident()}.tmp"
            with open(tmp, "w") as f:
                json.dump(record, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)

    def forget(self, key: str) -> None:
        with self._lock:
            self._memory.pop(key, None)
        path = self._path(key)
        if path is not None:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
