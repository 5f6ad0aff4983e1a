"""Pipe readers: the only code between the child's writes and the terminal.

A reader does three cheap things per chunk: pass the bytes through, append them
to the run log, and hand them to the pipeline thread. It never parses: if it
stalled, the pipe would fill and the training would block in write().

With the C pump built (`trainvisor/_native/_pump.c`) the first two are done by a C
thread that never needs the interpreter lock, so parsing that holds it (a progress
bar redrawn 240,000 times) cannot slow the child; the reader thread only moves the
pump's queued chunks to the channel. Without it (or with TRAINVISOR_PURE_PYTHON set)
the reader does all three itself, in Python.
"""
from __future__ import annotations

import errno
import logging
import os
import select
import threading
import time
from typing import Callable, Optional

from ..stderr_gate import STDERR, native_pump, write_all
from ..stream.source import READ_SIZE, ByteBudget, Chunk, Eof, Gap

__all__ = ["PipeReader", "RunLog", "open_run_log", "write_all", "PUMP_RING"]

log = logging.getLogger("trainvisor.supervisor")

PUMP_RING = 64 * 1024 * 1024
"""Bytes a C pump queues for its reader thread before it drops the oldest (counted, not parsed).
The reader empties it whenever it gets the interpreter lock; while the pipeline holds the lock that
can take a while: a child writing a 100 MB Caffe log flat out lost 11-23 MB of parsing to a 16 MiB
ring (pipe speed, ~500 MB/s, over ~80 ms without the lock), none to this one. A line's tail past
its cap is queued as its size alone, so a long line does not fill it."""
TAKE_WAIT = 0.5
"""How long a reader waits on its pump between looks at the pump's write errors."""


def open_run_log(fd: int) -> "RunLog":
    """The run log the readers will write: the C pump's when it is built (written without the
    interpreter lock), else the Python one; both interleave the streams by whole lines."""
    pump = native_pump()
    return pump.RunLog(fd) if pump is not None else RunLog(fd)


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
        self._segment, self._in_tail = 0, False  # where the stream stands in its line (`_line_tail`)
        self._pump = self._make_pump()

    def _make_pump(self) -> Optional[object]:
        """The C pump for this pipe, when it is built and can write everything this reader writes
        (a run log of its own kind, fd 2 through its gate)."""
        pump = native_pump()
        if pump is None or not isinstance(STDERR, pump.LineGate):
            return None
        if self.run_log is not None and not isinstance(self.run_log, pump.RunLog):
            return None
        parse = self._budget is not None and self._put is not None
        return pump.Pump(self.fd, out_fd=-1 if self.passthrough_fd is None else self.passthrough_fd, gate=STDERR,
                         run_log=self.run_log, capacity=PUMP_RING if parse else 0,
                         line_cap=(self._budget.line_cap or 0) if parse else 0)

    @property
    def native(self) -> bool:
        """Whether the C pump passes this pipe through."""
        return self._pump is not None

    def stop(self) -> None:
        """Make the reader return even if a grandchild still holds the pipe open."""
        if self._pump is not None:
            self._pump.stop()
            return
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def run(self) -> None:
        try:
            if self._pump is not None:
                self._take_loop(self._pump)
            else:
                self._loop()
        except Exception:  # never let a reader die silently: the pipe would fill
            log.exception("reader for %s failed", self.stream)
        finally:
            if self.run_log is not None and self._pump is None:  # a pump writes its held part line itself
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

    def _take_loop(self, pump) -> None:
        """The pump's queued chunks (and gaps: chunks its full ring dropped) onto the channel."""
        pump.start()
        try:
            put, stream, said = self._put, self.stream, (0, 0)
            while (items := pump.take(TAKE_WAIT)) is not None:
                for item in items:
                    if len(item) == 1:  # a line's tail past its cap: nothing the splitter reads
                        put(Gap(stream, item[0], 0, False))
                    elif type(item[0]) is int:
                        self.dropped_bytes += item[0]
                        put(Gap(stream, *item))
                    else:
                        self._queue(item[0], item[1], item[2])
                if pump.errors != said:
                    said = self._say_errors(pump.errors, said)
        finally:
            pump.stop()
            pump.join()
        self._say_errors(pump.errors, said)

    def _say_errors(self, errors: tuple[int, int], said: tuple[int, int]) -> tuple[int, int]:
        """The pump's write errors, each said once, as the Python loop says them."""
        out_err, log_err = errors
        if out_err and not said[0]:
            log.warning("cannot pass %s through (%s); still parsing it", self.stream, os.strerror(out_err))
        if log_err and not said[1]:
            log.error("cannot write the run log (%s); output still passes through", os.strerror(log_err))
        return errors

    def _queue(self, data: bytes, t: float, wall: float) -> None:
        """A chunk to the channel, or a gap when parsing is too far behind (the pass-through is done)."""
        budget = self._budget
        if self._line_tail(data, budget.line_cap):
            # nothing in it is read: the splitter shows the line cut at max_line and drops the rest
            self._put(Gap(self.stream, len(data), 0, False))
            return
        if budget.in_flight() > budget.limit:
            self.dropped_bytes += len(data)
            self._put(Gap(self.stream, len(data), data.count(b"\n"), data.endswith(b"\n")))
            return
        budget.produced += len(data)
        self._put(Chunk(self.stream, data, t, wall))

    def _line_tail(self, data: bytes, cap: Optional[int]) -> bool:
        """Whether `data` lies wholly in the tail of a line whose segment (its text since the last
        \\n or \\r) outgrew `cap`: the splitter has shown that line cut and reads nothing more of
        it, so a 200 MB line is not queued for the parser at all. Twice `cap`: the engine may
        transcode (UTF-16, GB18030), so its count of a segment's bytes is not quite this one."""
        if cap is None:
            return False
        nl = data.rfind(b"\n")
        if nl < 0 and self._in_tail:
            return True
        cr = data.rfind(b"\r", nl + 1)
        if nl < 0 and cr < 0:
            self._segment += len(data)
        else:
            self._segment = len(data) - 1 - max(nl, cr)
        self._in_tail = self._segment > 2 * cap
        return False

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
        if self._budget is not None:  # else nobody parses this source: pass-through only
            self._queue(data, self._clock(), self._wall())
