"""The OS-level lock that makes one process the writer of a log file.

`.NAME.lock` beside the log: the writer holds an exclusive `flock` on it for as long as it
runs (the kernel drops it when the process dies, however it dies) and writes its socket
address into it (and, after that line, its ledger: see `ledger.py`), so a handler created anywhere for the same real path finds the live
writer, or becomes it when there is none. No timing decides who writes.
"""
from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from .rotation import LogWriterError

__all__ = ["WriterLock", "acquire", "lock_path", "remove_stale_directory"]

_ADDRESS_BYTES = 4096  # the address line's room; the writer's ledger starts after it


def lock_path(log_path: str) -> str:
    """Hidden, so `name.*` globs over the rotated files never see it."""
    head, tail = os.path.split(log_path)
    return os.path.join(head, f".{tail}.lock")


class WriterLock:
    """One open description of the lock file. flock belongs to the open description, so
    two handlers in one process compete like two processes; forked children close their
    copy (the writer's `_forget_in_child`), or a dead writer's child would keep the lock."""

    def __init__(self, log_path: str) -> None:
        self.path = lock_path(log_path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.held = False

    def try_acquire(self) -> bool:
        """True when this process is now the writer; False when a live writer holds the
        lock or the file was removed by a writer that just closed (open a new one and retry)."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            current = os.stat(self.path).st_ino
        except FileNotFoundError:
            current = -1
        if current != os.fstat(self.fd).st_ino:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            return False
        self.held = True
        return True

    def publish(self, address: str) -> None:
        """The address line, in place: the writer's ledger follows it in the same file."""
        line = address.encode("utf-8") + b"\n"
        if len(line) > _ADDRESS_BYTES:
            raise OSError(f"socket address too long to publish: {address}")
        os.pwrite(self.fd, line, 0)  # a reader stops at the first newline: what follows is not read

    def published(self) -> str | None:
        """The address the holder published (or its dead predecessor: connecting fails, and
        the asker elects again); None while there has been none."""
        data = os.pread(self.fd, _ADDRESS_BYTES, 0)
        end = data.find(b"\n")
        if end <= 0:
            return None
        return data[:end].decode("utf-8", "replace")

    def close(self, *, keep_file: bool = False) -> None:
        """Release; the holder removes the file first, so no lock file outlives a clean close
        (a waiter that opened the removed file sees it gone after locking and retries), unless
        `keep_file`: the next holder then reads the ledger in it."""
        fd, self.fd = self.fd, -1
        if fd < 0:
            return
        if self.held and not keep_file:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        self.held = False
        try:
            os.close(fd)
        except OSError:
            pass

    def forget(self) -> None:
        """In a forked child: drop the inherited descriptor, leave file and lock to the parent."""
        fd, self.fd, self.held = self.fd, -1, False
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


def acquire(filename: str | os.PathLike[str]) -> WriterLock:
    """The lock of `filename`, for a writer started directly (not by a handler's election)."""
    path = os.path.abspath(os.fspath(filename))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    lock = WriterLock(os.path.realpath(path))  # the lock handlers elect with
    if not lock.try_acquire():
        lock.close()
        raise LogWriterError(f"{path} already has a log writer in another process")
    return lock


def remove_stale_directory(lock: WriterLock, ours: str, prefix: str) -> None:
    """The previous holder's address outlives it only if it was killed: its directory
    (a sibling of ours, made by us) is garbage now that we hold the lock."""
    previous = lock.published()
    if not previous:
        return
    stale = os.path.dirname(previous)
    if (os.path.dirname(stale) == os.path.dirname(ours) and stale != ours
            and os.path.basename(stale).startswith(prefix)):
        try:
            if os.stat(stale).st_uid == os.getuid():
                shutil.rmtree(stale, ignore_errors=True)
        except OSError:
            pass
