"""The run directory: who owns it, and which run it belongs to.

A run directory holds its identity (`run.json`: run id, attempts) and is locked while a run uses
it, so a second trainvisor on the same directory is refused at once instead of tearing the first
one's files. A directory that exists is resumed under the run id it holds: the same object keys,
metrics appended, the upload journal's unfinished work picked up. The lock is an `flock` on a
file inside the directory: the kernel drops it when the holder dies, even by SIGKILL, so a
killed run never leaves a stale lock behind.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Callable, NamedTuple, Optional

from ..errors import ConfigError

__all__ = ["RunDirectory", "RunIdentity", "RunDirBusy", "IDENTITY_NAME", "LOCK_NAME"]

IDENTITY_NAME = "run.json"
LOCK_NAME = "run.lock"


class RunDirBusy(ConfigError):
    """Another trainvisor holds this run directory."""


class RunIdentity(NamedTuple):
    """What a run directory says about its run: `attempt` counts the starts on it (1 for the first).
    A NamedTuple: every run defines it, and a frozen dataclass costs ~0.5 ms to define."""

    run_id: str
    attempt: int
    created: float


class RunDirectory:
    """Locked for as long as it is open; `identity` is this attempt's."""

    def __init__(self, path: Path, identity: RunIdentity, lock_fd: int) -> None:
        self.path = path
        self.identity = identity
        self._lock_fd: Optional[int] = lock_fd

    @classmethod
    def open(cls, path: Path, *, run_id: Optional[str], new_id: Callable[[], str],
             clock: Callable[[], float] = time.time) -> "RunDirectory":
        """Create or resume `path`. `run_id` is the one asked for (None: the directory's own, or
        `new_id()` for a new directory); asking for another id than the directory holds is an error."""
        path.mkdir(parents=True, exist_ok=True)
        fd = _lock(path)
        try:
            identity = _next_identity(path, run_id, new_id, clock)
            _write_identity(path, identity)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, identity, fd)

    def next_attempt(self) -> RunIdentity:
        """A restart of the child within the run: the next attempt number, recorded before the
        child starts (a later `trainvisor run` on this directory counts on from it)."""
        self.identity = RunIdentity(self.identity.run_id, self.identity.attempt + 1, self.identity.created)
        _write_identity(self.path, self.identity)
        return self.identity

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None


def _lock(path: Path) -> int:
    fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise RunDirBusy(f"run directory {path} is in use by another trainvisor (pid {holder}); "
                         "wait for it to end, or give another --run-dir") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def read_identity(path: Path) -> Optional[RunIdentity]:
    """The identity `path` holds, or None for a directory no run has used."""
    try:
        raw = (path / IDENTITY_NAME).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
        return RunIdentity(run_id=str(data["run_id"]), attempt=int(data["attempt"]), created=float(data["created"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path / IDENTITY_NAME}: not a trainvisor run record ({exc})") from exc


def _next_identity(path: Path, run_id: Optional[str], new_id: Callable[[], str],
                   clock: Callable[[], float]) -> RunIdentity:
    held = read_identity(path)
    if held is None:
        return RunIdentity(run_id=run_id or new_id(), attempt=1, created=clock())
    if run_id is not None and run_id != held.run_id:
        raise ConfigError(f"run directory {path} belongs to run {held.run_id!r}, not {run_id!r}: "
                          "leave out --run-id to resume it, or give another --run-dir")
    return RunIdentity(run_id=held.run_id, attempt=held.attempt + 1, created=held.created)


def _write_identity(path: Path, identity: RunIdentity) -> None:
    tmp = path / (IDENTITY_NAME + ".tmp")
    data = {"run_id": identity.run_id, "attempt": identity.attempt, "created": identity.created}
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path / IDENTITY_NAME)
