"""Pipe readers: the only code between the child's writes and the terminal.

A reader does three cheap things per chunk: pass the bytes through, append them
to the run log, and hand them to the pipeline thread. It never parses: if it
stalled, the pipe would fill and the training would block in write().
"""
from __future__ import annotations

import errno
import logging
import os
import select
import threading
import time
from typing import Callable, Optional

from ..stderr_gate import STDERR, write_all
from ..stream.source import READ_SIZE, ByteBudget, Chunk, Eof, Gap

__all__ = ["PipeReader", "RunLog", "write_all"]

log = logging.getLogger("trainvisor.supervisor")


class RunLog:
    """The child's two streams in one file, interleaved by whole lines.

    Python's print() writes a line and its newline in two write() calls, so
    interleaving raw chunks would splice a stderr line into the middle of a
    stdout line. Each stream's partial line is held back (up to `hold` bytes, or
    a ``\r`` progress update) and written with its end, under a lock.
    """

    def __init__(self, fd: int, *, hold: int = 64 * 1024) -> None:
        self.fd = fd
        self.hold = hold
        self._lock = threading.Lock()
        self._pending: dict[str, bytes] = {}
        self.failed = False

    def write(self, stream: str, data: bytes) -> None:
        pending = self._pending.get(stream, b"")
        buf = pending + data if pending else data
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r")) + 1
        if cut == 0 and len(buf) < self.hold:
            self._pending[stream] = buf
            return
        if cut == 0:
            cut = len(buf)
        self._pending[stream] = buf[cut:]
        self._write(buf[:cut])

    def close_stream(self, stream: str) -> None:
        rest = self._pending.pop(stream, b"")
        if rest:
            self._write(rest)

    def _write(self, data: bytes) -> None:
        if self.failed:
            return
        try:
            with self._lock:
                write_all(self.fd, data)
        except OSError as exc:
            self.failed = True
            log.error("cannot write the run log (%s); output still passes through", exc.strerror)


class PipeReader(threading.Thread):
    """Reads one of the child's pipes until EOF (or until `stop()` is called)."""

    def __init__(
        self,
        stream: str,
        fd: int,
        *,
        passthrough_fd: Optional[int],
        put: Optional[Callable[[object], None]],
        budget: Optional[ByteBudget],
        run_log: Optional[RunLog] = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(name=f"trainvisor-reader-{stream}", daemon=True)
        self.stream = stream
        self.fd = fd
        self.passthrough_fd = passthrough_fd
        self.run_log = run_log
        self._put = put
        self._budget = budget
        self._clock = clock
        self._wall = wall_clock
        self._wake_r, self._wake_w = os.pipe()
        self.dropped_bytes = 0

    def stop(self) -> None:
        """Make the reader return even if a grandchild still holds the pipe open."""
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def run(self) -> None:
        try:
            self._loop()
        except Exception:  # never let a reader die silently: the pipe would fill
            log.exception("reader for %s failed", self.stream)
        finally:
            if self.run_log is not None:
                self.run_log.close_stream(self.stream)
            if self._put is not None:
                self._put(Eof(self.stream))
            for fd in (self._wake_r, self._wake_w):
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _loop(self) -> None:
        fd, wake = self.fd, self._wake_r
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        poller.register(wake, select.POLLIN)
        read, handle = os.read, self._handle
        while True:
            events = poller.poll()
            if any(efd == wake for efd, _ in events):
                # Drain what is readable right now, then stop.
                while select.select([fd], [], [], 0)[0]:
                    data = read(fd, READ_SIZE)
                    if not data:
                        return
                    handle(data)
                return
            try:
                data = read(fd, READ_SIZE)
            except InterruptedError:
                continue
            except OSError as exc:
                if exc.errno == errno.EIO:  # a pty whose last writer closed: its end of file
                    return
                raise
            if not data:
                return
            handle(data)

    def _handle(self, data: bytes) -> None:
        stream = self.stream
        if self.passthrough_fd is not None:
            try:
                STDERR.pass_through(self.passthrough_fd, data)
            except OSError as exc:
                # Our own stdout is gone (closed pipe): keep draining the child.
                log.warning("cannot pass %s through (%s); still parsing it", stream,
                            os.strerror(exc.errno or errno.EIO))
                self.passthrough_fd = None
        if self.run_log is not None:
            self.run_log.write(stream, data)
        budget = self._budget
        if budget is None:  # nobody parses this source: pass-through only
            return
        if budget.in_flight() > budget.limit:
            self.dropped_bytes += len(data)
            self._put(Gap(stream, len(data), data.count(b"\n"), data.endswith(b"\n")))
            return
        budget.produced += len(data)
        self._put(Chunk(stream, data, self._clock(), self._wall()))
