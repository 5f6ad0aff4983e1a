"""Small per-key JSON records of uploads in progress, so an attempt can resume an earlier one.

Given a folder (in the run directory), each record is one file written atomically (temp, then
rename): a killed process leaves the old record or the new one, never half. There is no fsync:
a record lost to a power cut only costs sending those parts again, and an unreadable one reads
as none. Without a folder they live in memory, so retries within one process still resume.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Optional

__all__ = ["ResumeRecords", "S3ResumeRecord"]


@dataclass(frozen=True)
class S3ResumeRecord:
    """An S3 multipart upload in progress for one version of a file (bucket, size, mtime, part
    size): only that version may resume from its parts; any other one aborts it."""

    upload_id: str
    bucket: str
    size: int
    mtime_ns: int
    part_size: int

    def is_for(self, bucket: str, size: int, mtime_ns: int, part_size: int) -> bool:
        return (self.bucket, self.size, self.mtime_ns, self.part_size) == (bucket, size, mtime_ns, part_size)

    def to_json_dict(self) -> dict[str, Any]:
        # The stored shape predates this type: records written by an older trainvisor still resume.
        return {"upload_id": self.upload_id, "version": [self.bucket, self.size, self.mtime_ns, self.part_size]}

    @classmethod
    def from_json_dict(cls, d: Mapping[str, Any]) -> Optional["S3ResumeRecord"]:
        """None for a record this version cannot read: the upload starts over rather than guess."""
        try:
            bucket, size, mtime_ns, part_size = d["version"]
            record = cls(d["upload_id"], bucket, size, mtime_ns, part_size)
        except (KeyError, TypeError, ValueError):
            return None
        fields_ok = isinstance(record.upload_id, str) and isinstance(record.bucket, str)
        numbers_ok = all(isinstance(v, int) for v in (record.size, record.mtime_ns, record.part_size))
        return record if fields_ok and numbers_ok else None


class ResumeRecords:
    def __init__(self, folder: Optional[str]) -> None:
        self.folder = folder
        self._memory: dict[str, dict] = {}
        self._lock = threading.Lock()

    def _path(self, key: str) -> str:
        assert self.folder is not None
        return os.path.join(self.folder, hashlib.sha1(key.encode()).hexdigest() + ".json")

    def get(self, key: str) -> Optional[dict]:
        if self.folder is None:
            with self._lock:
                return self._memory.get(key)
        try:
            with open(self._path(key)) as f:
                stored = json.load(f)
        except (OSError, ValueError):  # none, or unreadable: start over rather than guess
            return None
        ok = isinstance(stored, dict) and stored.get("key") == key and isinstance(stored.get("record"), dict)
        return stored["record"] if ok else None

    def put(self, key: str, record: dict) -> None:
        if self.folder is None:
            with self._lock:
                self._memory[key] = record
            return
        path = self._path(key)
        # One writer at a time, so the last put() wins: the qiniu SDK puts a snapshot from
        # each of its worker threads, and an older one landing last would forget parts.
        with self._lock:
            os.makedirs(self.folder, exist_ok=True)
            with open(path + ".tmp", "w") as f:
                json.dump({"key": key, "record": record}, f)
            os.replace(path + ".tmp", path)

    def forget(self, key: str) -> None:
        if self.folder is None:
            with self._lock:
                self._memory.pop(key, None)
            return
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass
