"""Who writes a log file: the live writer if there is one, else exactly one of the asking
processes (whichever takes the `WriterLock`); the others learn its address from the lock file."""
from __future__ import annotations

import time
from typing import Callable, NamedTuple

from .lockfile import WriterLock
from .rotation import LogWriterError
from .target import LogTarget
from .writer import LogWriterServer

__all__ = ["LogTarget", "Elected", "elect"]


class Elected(NamedTuple):
    address: str
    server: LogWriterServer | None  # set when this process became the writer


def elect(target: LogTarget, *, mode: str = "a", timeout: float = 10.0,
          clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> Elected:
    """Find the writer of `target` or become it. Raises LogWriterError when the lock file
    cannot be opened or a holder never publishes its address within `timeout`."""
    deadline = clock() + timeout
    while True:
        try:
            lock = WriterLock(target.path)
        except OSError as exc:
            raise LogWriterError(f"cannot open the writer lock beside {target.path}: {exc}") from exc
        if lock.try_acquire():
            server = LogWriterServer.start(target.path, mode=mode, maxBytes=target.max_bytes,
                                           backupCount=target.backup_count,
                                           socket_dir=target.socket_dir, lock=lock)
            server.close_at_exit = False  # its handler closes it, after the last record
            return Elected(server.address, server)
        address = lock.published()
        lock.close()
        if address is not None:
            return Elected(address, None)
        if clock() > deadline:  # a holder that never publishes: hung between lock and listen
            raise LogWriterError(f"the writer of {target.path} holds its lock but never published an address")
        sleep(0.002)
