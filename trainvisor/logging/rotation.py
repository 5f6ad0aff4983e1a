"""The rotating log file the one writer appends to.

Rotation renames while the file is still open, so a rename that fails (a directory in the
way, a permission change, a full disk) leaves the writer with the same open file: it keeps
writing there, warns once, and tries again at the next size threshold.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

from ..errors import TrainvisorError
from ..stderr_gate import write_all
from .ledger import Ledger

__all__ = ["LogWriterError", "Mark", "RotatingFile", "write_all", "warn"]

#: Whose records a batch holds: (first index, end index, ledger slot, that sender's count
#: after the record at end - 1). One per sender per read, not per record.
Mark = tuple[int, int, int, int]


def _counts_at(marks: list[Mark], end: int) -> list[tuple[int, int]]:
    """Each sender's count once the batch's records before index `end` are in the file."""
    counts = []
    for start, stop, slot, count in marks:
        if start >= end:
            break
        counts.append((slot, count - max(0, stop - end)))
    return counts


class LogWriterError(TrainvisorError):
    """The writer could not be started: unusable log path or socket directory."""


def warn(text: str) -> None:
    """The writer never logs through logging: its own handler may be this writer."""
    from ..stderr_gate import STDERR  # between the training's lines when both share stderr

    STDERR.say(f"trainvisor.logging: {text}\n")


class RotatingFile:
    """An append-only file rotated by size like `RotatingFileHandler`: `name`, `name.1` ...
    `name.N`; a file never exceeds `max_bytes` unless a single record does or rotation failed."""

    def __init__(self, filename: str | os.PathLike[str], *, mode: str = "a", max_bytes: int = 0,
                 backup_count: int = 10, report: Callable[[str], None] = warn) -> None:
        if mode not in ("a", "w"):
            raise LogWriterError(f"log file mode must be 'a' or 'w', not {mode!r}")
        self.path = os.path.abspath(os.fspath(filename))
        self.max_bytes = max_bytes
        self.backup_count = backup_count
        self._report = report
        # As RotatingFileHandler: a rotating file is always appended to; backupCount=0 disables it.
        self._rotating = max_bytes > 0 and backup_count > 0
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        if mode == "w" and not max_bytes > 0:
            flags |= os.O_TRUNC
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._flags = flags & ~os.O_TRUNC
        self.fd = os.open(self.path, flags, 0o644)
        st = os.fstat(self.fd)
        self.size, self.inode = st.st_size, st.st_ino
        self.ledger: Ledger | None = None  # set by the writer: a killed writer's successor reads it
        self._threshold = max_bytes
        self._backups = self._count_backups() if self._rotating else 0
        self.rotations = 0
        self.failed_rotations = 0
        self._warned = False

    def write_records(self, payloads: list[bytes], lock: threading.Lock, marks: list[Mark] = ()) -> None:
        """Append whole records; rotate between records when the next one would not fit.
        `marks` say whose records these are (see `Mark`), for the ledger."""
        data = b"".join(payloads)
        if not self._rotating or self.size + len(data) <= self._threshold:
            self._append(data, [(m[2], m[3]) for m in marks])  # most batches: no per-record work
            return
        start = 0
        pending_size = 0
        for i, payload in enumerate(payloads):
            n = len(payload)
            filled = self.size + pending_size
            if filled and filled + n > self._threshold:
                if i > start:
                    self._append(b"".join(payloads[start:i]), _counts_at(marks, i))
                    start, pending_size = i, 0
                with lock:  # a fork must not see the fd number mid-swap
                    self._rollover()
            pending_size += n
        if len(payloads) > start:
            self._append(b"".join(payloads[start:]), _counts_at(marks, len(payloads)))

    def _append(self, data: bytes, counts: list[tuple[int, int]]) -> None:
        ledger = self.ledger
        if ledger is None:
            write_all(self.fd, data)
            self.size += len(data)
            return
        ledger.begin(self.inode, self.size, len(data), counts)
        try:
            write_all(self.fd, data)
        except OSError:
            self._cut_back()
            ledger.commit(counts)  # the writer acks them anyway (stderr, or dropped with a warning)
            raise
        self.size += len(data)
        ledger.commit(counts)

    def _cut_back(self) -> None:
        """A write that failed part-way leaves no half record behind (disk full)."""
        try:
            os.ftruncate(self.fd, self.size)
        except OSError:
            try:
                self.size = os.fstat(self.fd).st_size
            except OSError:
                pass

    def _rollover(self) -> None:
        try:
            self._shift_backups()
            os.replace(self.path, f"{self.path}.1")
            self._backups = min(self._backups + 1, self.backup_count)
        except OSError as exc:
            self._rotation_failed("cannot rotate", exc)
            return
        try:
            fd = os.open(self.path, self._flags, 0o644)
        except OSError as exc:  # put the open file back under its name: still nothing lost
            try:
                os.replace(f"{self.path}.1", self.path)
            except OSError:
                pass
            self._rotation_failed("rotated but cannot reopen", exc)
            return
        self._close_fd()
        self.fd, self.size, self._threshold = fd, 0, self.max_bytes
        self.inode = os.fstat(fd).st_ino
        self.rotations += 1
        self._warned = False

    def _count_backups(self) -> int:
        """The highest `name.K` (K <= backup_count) there is: one directory listing per writer,
        not a stat of each of `backup_count` names (10,000 at each rotation). A writer killed
        while shifting leaves a gap in the numbers: the highest one still counts, so the next
        shift moves every older file up and never overwrites one."""
        head, tail = os.path.split(self.path)
        prefix = tail + "."
        top = 0
        try:
            names = os.listdir(head or ".")
        except OSError:
            return 0
        for name in names:
            if name.startswith(prefix):
                suffix = name[len(prefix):]
                if suffix.isdigit() and suffix[0] != "0":
                    top = max(top, min(int(suffix), self.backup_count))
        return top

    def _shift_backups(self) -> None:
        top = min(self._backups, self.backup_count - 1)  # all slots full: the oldest is overwritten
        for i in range(top, 0, -1):
            try:
                os.replace(f"{self.path}.{i}", f"{self.path}.{i + 1}")
            except FileNotFoundError:  # a gap (a writer killed mid-shift, or removed by hand)
                continue

    def _rotation_failed(self, what: str, exc: OSError) -> None:
        # Retry once as much again has been written: not before every record.
        self._threshold = self.size + self.max_bytes
        self.failed_rotations += 1
        if not self._warned:
            self._warned = True
            self._report(f"{what} {self.path}: {exc}; writing on to the current file,"
                         f" next try after {self.max_bytes} more bytes")

    def _close_fd(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        """Never raises: closing is what runs while everything else is going wrong."""
        self._close_fd()
