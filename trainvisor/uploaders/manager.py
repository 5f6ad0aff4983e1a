"""Uploads checkpoint sets off the caller's thread: journal first, retry with backoff, manifest last.

`submit` only journals and enqueues, so the reader thread never waits on the network. `resume`
re-submits the sets a killed trainvisor left unfinished in the same run directory; a file whose
current version is already verified is not uploaded again.
"""
from __future__ import annotations

import json
import os
import queue
import random
import threading
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..events import Checkpoint
from .base import UploadedObject, Uploader, UploadError
from .journal import FAILED, Journal

__all__ = ["UploadManager", "DrainReport", "RetryPolicy", "UploadProgress"]

log = logging.getLogger("trainvisor.upload")


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter. Retryable errors are retried up to `attempts` times,
    by default without limit: an outage of the store must not lose a checkpoint, and at exit
    `--drain-timeout` bounds the wait (what is left is journaled and resumed next time)."""

    attempts: Optional[int] = None
    base: float = 0.5
    cap: float = 30.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0, min(self.cap, self.base * 2 ** attempt))


@dataclass(frozen=True)
class DrainReport:
    """What was left when drain returned: keys not yet verified, and permanent failures."""

    pending: tuple[str, ...]
    failed: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class UploadProgress:
    """Bytes and files so far, over everything submitted (a resumed file counts from its start)."""

    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    files_skipped: int = 0
    """Files found already verified in their current version (not uploaded again)."""


class UploadManager:
    """Bounded-concurrency uploads of checkpoint sets; `key_template` uses prefix, run_id, relpath.

    With `manifests=False` (`trainvisor upload`), each set is just its files.
    """

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
        manifests: bool = True,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Optional[Callable[[float], object]] = None,
        rng: Optional[random.Random] = None,
    ) -> None:
        self._up = uploader
        self._journal = Journal(run_dir)
        self._run_dir = run_dir
        self._run_id, self._prefix, self._template = run_id, prefix, key_template
        self._delete = delete_after_upload
        self._manifests = manifests
        self._bytes_done = self._bytes_total = self._files_done = self._files_total = self._skipped = 0
        self._stopping = threading.Event()
        self._retry, self._rng = retry, rng or random.Random()
        self._sleep = sleep if sleep is not None else self._stopping.wait  # close() cuts a backoff short
        self._queue: "queue.Queue[Optional[Checkpoint]]" = queue.Queue()
        self._lock = threading.Lock()
        self._failed: list[str] = []
        self._pending: set[str] = set()
        self._set_locks: dict[str, threading.Lock] = {}
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

    def _set_key(self, cp: Checkpoint) -> str:
        return self.key_for(cp.name + ".manifest.json") if self._manifests else self.key_for(cp.files[0].relpath)

    def submit(self, checkpoint: Checkpoint) -> None:
        """Journal the checkpoint's files and enqueue it; never blocks on the network."""
        with self._lock:
            for f in checkpoint.files:
                st = os.stat(f.path)
                key = self.key_for(f.relpath)
                self._journal.queue(key, f.path, size=st.st_size, mtime_ns=st.st_mtime_ns)
                self._pending.add(key)
                self._bytes_total += st.st_size
                self._files_total += 1
            self._journal.add_set(self._set_key(checkpoint), checkpoint)
            if self._manifests:
                self._pending.add(self._set_key(checkpoint))
        self._queue.put(checkpoint)

    def resume(self) -> int:
        """Re-submit the sets an earlier trainvisor left unfinished in this run directory.

        A set whose files are gone is recorded as failed and reported, never silently dropped."""
        count = 0
        for cp in self._journal.unfinished_sets():
            missing = [f.path for f in cp.files if not os.path.exists(f.path)]
            if missing:
                self._journal.set_done(self._set_key(cp), FAILED)
                with self._lock:
                    self._failed.extend(self.key_for(f.relpath) for f in cp.files if f.path in missing)
                continue
            self.submit(cp)
            count += 1
        return count

    def progress(self) -> UploadProgress:
        with self._lock:
            return UploadProgress(self._bytes_done, self._bytes_total, self._files_done, self._files_total,
                                  self._skipped)

    def _count(self, nbytes: int) -> None:
        with self._lock:
            self._bytes_done += nbytes

    def _work(self) -> None:
        while (cp := self._queue.get()) is not None:
            try:
                self._upload_set(cp)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _upload_set(self, cp: Checkpoint) -> None:
        """One set at a time per set key: a set submitted again while it uploads (resumed, then
        rewritten by the training) waits, then finds its unchanged files already verified."""
        set_key = self._set_key(cp)
        with self._lock:
            set_lock = self._set_locks.setdefault(set_key, threading.Lock())
        with set_lock:
            self._upload_set_locked(cp, set_key)

    def _upload_set_locked(self, cp: Checkpoint, set_key: str) -> None:
        entries = []
        for f in cp.files:
            key = self.key_for(f.relpath)
            obj = self._upload_one(f.path, key)
            if obj is None and self._stopping.is_set():
                return  # stays unfinished in the journal: the next trainvisor resumes it
            if obj is None:
                self._journal.set_done(set_key, FAILED)
                with self._lock:  # no manifest for an incomplete set
                    self._pending.discard(set_key)
                return
            entries.append({"relpath": f.relpath, "key": key, "size": obj.size, "checksum": obj.checksum})
        if not self._manifests:
            self._journal.set_done(set_key)
            return
        manifest = {"run_id": self._run_id, "name": cp.name, "iteration": cp.iteration,
                    "epoch": cp.epoch, "framework": cp.framework, "files": entries}
        mkey = self.key_for(cp.name + ".manifest.json")
        mpath = os.path.join(self._run_dir, f".{cp.name}.manifest.json")
        with open(mpath, "w") as out:
            json.dump(manifest, out, indent=1)
        st = os.stat(mpath)
        self._journal.queue(mkey, mpath, size=st.st_size, mtime_ns=st.st_mtime_ns)
        if self._upload_one(mpath, mkey) is None:
            if not self._stopping.is_set():
                self._journal.set_done(set_key, FAILED)
            return
        self._journal.set_done(set_key)
        if self._delete:
            for f in cp.files:
                os.unlink(f.path)

    def _already_verified(self, path: str, key: str) -> Optional[UploadedObject]:
        """The stored object, when exactly this version of `path` was verified before
        (by this trainvisor or by one killed earlier on the same run directory)."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        checksum = self._journal.verified_checksum(key, size=st.st_size, mtime_ns=st.st_mtime_ns)
        return None if checksum is None else UploadedObject(key=key, size=st.st_size, checksum=checksum)

    def _upload_one(self, path: str, key: str) -> Optional[UploadedObject]:
        done = self._already_verified(path, key)
        if done is not None:
            with self._lock:
                self._pending.discard(key)
                self._bytes_done += done.size
                self._files_done += 1
                self._skipped += 1
            return done
        attempt = 0
        while not self._stopping.is_set():
            self._journal.start(key)
            sent = [0]

            def progress(n: int) -> None:
                sent[0] += n
                self._count(n)

            try:
                before = os.stat(path)
                obj = self._up.upload(path, key, progress=progress)
                after = os.stat(path)
                if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or obj.size != after.st_size:
                    # Verified, but of a file that was being rewritten meanwhile: the
                    # stored copy may be a mix of both states. Never record that as done.
                    raise UploadError(f"{path} changed during its upload", retryable=True)
            except OSError as exc:
                return self._give_up(key, f"cannot read {path}: {exc.strerror}")
            except UploadError as exc:
                self._count(-sent[0])
                if not exc.retryable or attempt + 1 == self._retry.attempts:
                    return self._give_up(key, str(exc))
                self._journal.retry(key, str(exc))
                delay = self._retry.delay(attempt, self._rng)
                log.warning("upload of %s failed (%s); attempt %d, next in %.1f s", key, exc, attempt + 1, delay)
                self._sleep(delay)
                if self._stopping.is_set():
                    return None  # journaled as queued: resumed by the next trainvisor on this run dir
                attempt += 1
                continue
            self._journal.verified(key, obj.checksum, size=after.st_size, mtime_ns=after.st_mtime_ns)
            log.info("uploaded %s (%d bytes, %s)", key, obj.size, obj.checksum)
            with self._lock:
                self._pending.discard(key)
                self._bytes_done += obj.size - sent[0]
                self._files_done += 1
            return obj
        return None

    def _give_up(self, key: str, error: str) -> None:
        log.error("upload of %s failed for good: %s", key, error)
        self._journal.failed(key, error)
        with self._lock:
            self._failed.append(key)
            self._pending.discard(key)
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
        """Stop the workers; an upload still in flight after 5 s is left to the journal."""
        self._stopping.set()
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=5)
        self._journal.close()
