"""How the upload manager sends one object: asked of the store first, retried with backoff,
journaled verified only when the file did not change under it, paid for at the rate limit.
A mixin of `UploadManager` (its journal, counters, retry policy and stop event), kept apart
so that the manager reads as the life of a checkpoint set."""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Optional

from ..checkpoints import Manifest
from .base import UploadedObject, UploadError
from .journal import FAILED, QUEUED, VERIFIED
from .outcomes import UploadCancelled

if TYPE_CHECKING:
    from .manager import UploadManager

__all__ = ["ObjectSending"]

log = logging.getLogger("trainvisor.upload")


class ObjectSending:
    """Sending one object for `UploadManager`."""

    def _pay(self: "UploadManager", nbytes: int, whole: bool = False) -> None:
        """Wait for the rate limit's tokens for `nbytes`; closing cuts the wait short."""
        self._meter.waited(self._limiter.take(nbytes, cancelled=self._stopping.is_set,  # type: ignore[union-attr]
                                              whole=whole))
        if self._stopping.is_set():
            raise UploadCancelled()


    def _count(self: "UploadManager", nbytes: int) -> None:
        with self._lock:
            self._bytes_done += nbytes

    def _upload_manifest(self: "UploadManager", manifest: Manifest) -> str:
        """Written once: the local copy is rewritten only when it changed, and the store is
        asked before the PUT (a kill may have come between an earlier PUT and its journal row)."""
        mkey = self.key_for(manifest.name + ".manifest.json")
        mpath = os.path.join(self._run_dir, f".{manifest.name}.manifest.json")
        text = manifest.to_json()
        try:
            with open(mpath) as old:
                same = old.read() == text
        except OSError:
            same = False
        if not same:
            with open(mpath, "w") as out:
                out.write(text)
        st = os.stat(mpath)
        self._journal.queue(mkey, mpath, size=st.st_size, mtime_ns=st.st_mtime_ns)
        if self._upload_one(mpath, mkey, ask_store=True) is not None:
            return VERIFIED
        if self._stopping.is_set():
            return QUEUED
        self._journal.set_done(mkey, FAILED)
        return FAILED

    def _upload_one(self: "UploadManager", path: str, key: str, *, ask_store: bool = False) -> Optional[UploadedObject]:
        done = self._store.known(path, key, ask_store=ask_store)
        if done is not None:
            with self._lock:
                self._bytes_done += done.size
                self._files_done += 1
                self._skipped += 1
                self._bytes_skipped += done.size
            return done
        attempt = 0
        while not self._stopping.is_set():
            self._journal.start(key)
            sent = [0]
            try:
                obj = self._attempt(path, key, sent)
            except OSError as exc:
                return self._give_up(key, f"cannot read {path}: {exc.strerror}")
            except UploadError as exc:
                self._count(-sent[0])
                if self._stopping.is_set():
                    self._journal.retry(key, str(exc))
                    return None  # journaled as queued: resumed by the next trainvisor on this run dir
                if not exc.retryable or attempt + 1 == self._retry.attempts:
                    return self._give_up(key, str(exc))
                self._journal.retry(key, str(exc))
                delay = self._retry.delay(attempt, self._rng)
                log.warning("upload of %s failed (%s); attempt %d, next in %.1f s", key, exc, attempt + 1, delay)
                self._sleep(delay)
                attempt += 1
                continue
            log.info("uploaded %s (%d bytes, %s)", key, obj.size, obj.checksum)
            with self._lock:
                self._bytes_done += obj.size - sent[0]
                self._files_done += 1
            return obj
        return None

    def _attempt(self: "UploadManager", path: str, key: str, sent: list[int]) -> UploadedObject:
        """One upload of `path`, journaled verified only when the file did not change under it."""

        def progress(n: int) -> None:
            if self._stopping.is_set():
                raise UploadCancelled()
            sent[0] += n
            self._count(n)
            if self._limiter is not None and self._unpace is None:  # not paid before sending
                self._pay(n)

        before = os.stat(path)
        obj = self._up.upload(path, key, progress=progress)
        after = os.stat(path)
        if (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns) or obj.size != after.st_size:
            # Verified, but of a file that was being rewritten meanwhile: the
            # stored copy may be a mix of both states. Never record that as done.
            raise UploadError(f"{path} changed during its upload", retryable=True)
        self._journal.verified(key, obj.checksum, size=after.st_size, mtime_ns=after.st_mtime_ns)
        return obj

    def _give_up(self: "UploadManager", key: str, error: str) -> None:
        log.error("upload of %s failed for good: %s", key, error)
        self._journal.failed(key, error)
        return None
