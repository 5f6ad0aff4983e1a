"""trainvisor's own messages between the training's lines, never inside one.

trainvisor's stderr is also the training's: a reader thread passes the child's stderr bytes
through in the chunks the pipe gives, which often end mid-line, while any other thread
(the uploader, the run log's writer) may warn at any moment. Written naively, a warning
lands in the middle of a training line (``stderr litrainvisor: ...\\nne 41``), which breaks
the line for a reader and for any tool that parses the saved output.

The gate is the one place both write through: the pass-through writes under its lock and
records whether the stream now stands at a line start; a message waits (at most `wait`
seconds, on a condition, never polling) for a line start. A training that leaves a line
open longer (a progress bar redrawn with ``\\r`` for a whole epoch) gets the message on a
line of its own after a newline, rather than a warning held back for an hour.

With the C pump built, `STDERR` is its gate (`_native._pump.LineGate`: the same behaviour
under a C lock), so the pump's thread writes the training's stderr without the interpreter
lock and trainvisor's messages still wait for a line start.
"""
from __future__ import annotations

import os
import select
import threading

__all__ = ["LineGate", "STDERR", "write_all", "native_pump"]


def native_pump():
    """The C pump module (`trainvisor._native._pump`), or None: not built, or
    TRAINVISOR_PURE_PYTHON set (the pure-Python readers and gate, as for the parsers)."""
    if os.environ.get("TRAINVISOR_PURE_PYTHON"):
        return None
    try:
        from ._native import _pump
    except ImportError:
        return None
    return _pump


def write_all(fd: int, data: bytes | memoryview) -> None:
    """os.write until everything is written (pipes and ttys take partial writes). The one
    writer of the training's bytes and of trainvisor's own lines to an inherited fd."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            # The fd was left non-blocking by someone else (it is shared): wait until writable.
            select.select([], [fd], [], 1.0)
            continue
        view = view[n:]


class LineGate:
    """One output fd shared by the training's pass-through and trainvisor's own messages."""

    def __init__(self, fd: int, *, wait: float = 1.0) -> None:
        self.fd = fd
        self.wait = wait
        self._cond = threading.Condition()
        self._at_line_start = True
        self._pending: list[bytes] = []  # messages waiting for a line start, in order
        self._said = 0  # messages asked for so far
        self._written = 0  # of them, written

    @property
    def waiting(self) -> int:
        """Messages waiting for a line start now (tests watch it)."""
        return self._said - self._written

    def pass_through(self, fd: int, data: bytes | memoryview) -> None:
        """The training's bytes, written to `fd` as they are (OSError propagates to the caller).
        Messages waiting go out right after the chunk's last newline, inside the chunk if need be."""
        if fd != self.fd:
            write_all(fd, data)
            return
        if not data:
            return
        with self._cond:
            if self._pending:
                cut = bytes(data[-4096:]).rfind(b"\n")  # the last newline, if near the end
                if cut >= 0:
                    cut += len(data) - min(len(data), 4096) + 1
                    write_all(fd, data[:cut])
                    self._write_pending("")
                    data = data[cut:]
                    self._at_line_start = True
                    if not data:
                        return
            write_all(fd, data)
            self._at_line_start = data[-1] == 10  # b"\n"

    def say(self, text: str) -> None:
        """Write `text` (one or more whole lines) at a line start of the stream; never raises."""
        data = (text if text.endswith("\n") else text + "\n").encode("utf-8", "backslashreplace")
        with self._cond:
            if self._at_line_start and not self._pending:
                self._said += 1
                self._pending.append(data)
                self._write_pending("")
                return
            self._said += 1
            mine = self._said
            self._pending.append(data)
            self._cond.notify_all()  # whoever watches `waiting` (a test) sees it change
            if not self._cond.wait_for(lambda: self._written >= mine, timeout=self.wait):
                # the training's line stays open (a bar redrawn for a whole epoch): our own line
                self._write_pending("" if self._at_line_start else "\n")
                self._at_line_start = True

    def _write_pending(self, lead: str) -> None:
        """Every waiting message, in order (the lock held); a write error drops them, quietly."""
        data, self._pending = lead.encode() + b"".join(self._pending), []
        self._written = self._said
        self._cond.notify_all()
        try:
            write_all(self.fd, data)
        except OSError:
            pass


def _gate_of_stderr() -> "LineGate":
    pump = native_pump()
    return pump.LineGate(2) if pump is not None else LineGate(2)


STDERR = _gate_of_stderr()
"""The gate of fd 2: the supervisor passes the child's stderr through it, and trainvisor's own
warnings (the `trainvisor:` handler, the log writer's) are said through it."""
