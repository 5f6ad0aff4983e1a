"""Uploads checkpoint sets off the caller's thread: journal first, retry with backoff, manifest last.

`submit` only journals and enqueues, so the reader thread never waits on the network.
"""
from __future__ import annotations

import json
import os
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..events import Checkpoint
from .base import Uploader, UploadError
from .journal import Journal

__all__ = ["UploadManager", "DrainReport", "RetryPolicy"]


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter; retryable errors are retried up to `attempts` times."""

    attempts: int = 8
    base: float = 0.5
    cap: float = 30.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0, min(self.cap, self.base * 2 ** attempt))


@dataclass(frozen=True)
class DrainReport:
    """What was left when drain returned: keys not yet verified, and permanent failures."""

    pending: tuple[str, ...]
    failed: tuple[str, ...] = field(default=())


class UploadManager:
    """Bounded-concurrency uploads of checkpoint sets; `key_template` uses prefix, run_id, relpath."""

    def __init__(
        self,
        uploader: Uploader,
        *,
        run_dir: str,
        run_id: str,
        prefix: str = "",
        key_template: str = "{prefix}/{run_id}/{relpath}",
        concurrency: int = 2,
        delete_after_upload: bool = False,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
        rng: Optional[random.Random] = None,
    ) -> None:
        self._up = uploader
        self._journal = Journal(run_dir)
        self._run_dir = run_dir
        self._run_id, self._prefix, self._template = run_id, prefix, key_template
        self._delete = delete_after_upload
        self._retry, self._sleep, self._rng = retry, sleep, rng or random.Random()
        self._queue: "queue.Queue[Optional[Checkpoint]]" = queue.Queue()
        self._lock = threading.Lock()
        self._failed: list[str] = []
        self._pending: set[str] = set()
        self._threads = [
            threading.Thread(target=self._work, name=f"trainvisor-upload-{i}", daemon=True)
            for i in range(concurrency)
        ]
        for t in self._threads:
            t.start()

    def key_for(self, relpath: str) -> str:
        return self._template.format(prefix=self._prefix, run_id=self._run_id, relpath=relpath).lstrip("/")

    def preflight(self) -> None:
        self._up.preflight()

    def submit(self, checkpoint: Checkpoint) -> None:
        """Journal the checkpoint's files and enqueue it; never blocks on the network."""
        with self._lock:
            for f in checkpoint.files:
                st = os.stat(f.path)
                key = self.key_for(f.relpath)
                self._journal.queue(key, f.path, size=st.st_size, mtime_ns=st.st_mtime_ns)
                self._pending.add(key)
            self._pending.add(self.key_for(checkpoint.name + ".manifest.json"))
        self._queue.put(checkpoint)

    def _work(self) -> None:
        while (cp := self._queue.get()) is not None:
            try:
                self._upload_set(cp)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _upload_set(self, cp: Checkpoint) -> None:
        entries = []
        for f in cp.files:
            key = self.key_for(f.relpath)
            obj = self._upload_one(f.path, key)
            if obj is None:
                with self._lock:  # no manifest for an incomplete set
                    self._pending.discard(self.key_for(cp.name + ".manifest.json"))
                return
            entries.append({"relpath": f.relpath, "key": key, "size": obj.size, "checksum": obj.checksum})
        manifest = {"run_id": self._run_id, "name": cp.name, "iteration": cp.iteration,
                    "epoch": cp.epoch, "framework": cp.framework, "files": entries}
        mkey = self.key_for(cp.name + ".manifest.json")
        mpath = os.path.join(self._run_dir, f".{cp.name}.manifest.json")
        with open(mpath, "w") as out:
            json.dump(manifest, out, indent=1)
        st = os.stat(mpath)
        self._journal.queue(mkey, mpath, size=st.st_size, mtime_ns=st.st_mtime_ns)
        if self._upload_one(mpath, mkey) is not None and self._delete:
            for f in cp.files:
                os.unlink(f.path)

    def _upload_one(self, path: str, key: str):
        for attempt in range(self._retry.attempts):
            self._journal.start(key)
            try:
                before = os.stat(path)
                obj = self._up.upload(path, key)
                after = os.stat(path)
                if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or obj.size != after.st_size:
                    # Verified, but of a file that was being rewritten meanwhile: the
                    # stored copy may be a mix of both states. Never record that as done.
                    raise UploadError(f"{path} changed during its upload", retryable=True)
            except OSError as exc:
                exc = UploadError(f"cannot read {path}: {exc.strerror}", retryable=False)
                self._journal.failed(key, str(exc))
                with self._lock:
                    self._failed.append(key)
                    self._pending.discard(key)
                return None
            except UploadError as exc:
                if not exc.retryable or attempt + 1 == self._retry.attempts:
                    self._journal.failed(key, str(exc))
                    with self._lock:
                        self._failed.append(key)
                        self._pending.discard(key)
                    return None
                self._journal.retry(key, str(exc))
                self._sleep(self._retry.delay(attempt, self._rng))
                continue
            self._journal.verified(key, obj.checksum)
            with self._lock:
                self._pending.discard(key)
            return obj
        return None

    def drain(self, timeout: float) -> DrainReport:
        """Wait up to `timeout` seconds for queued uploads; report what is left."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending:
                    break
            time.sleep(0.02)
        with self._lock:
            return DrainReport(pending=tuple(sorted(self._pending)), failed=tuple(self._failed))

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=5)
        self._journal.close()
