"""One process's connection to the writer: opened lazily, re-opened after fork, and
abandoned (with one warning, records then going to stderr) when the writer is gone."""
from __future__ import annotations

import os
import socket
import struct
import sys

__all__ = ["WriterConnection", "DEFAULT_SEND_TIMEOUT"]

#: How long one record may wait for a writer that stopped reading before it is given up on.
DEFAULT_SEND_TIMEOUT = 10.0


class WriterConnection:
    """Sends frames to the writer at `address`. Not thread-safe: callers hold a lock
    (the handler's), which the logging module re-initialises in a forked child."""

    def __init__(self, address: str, *, send_timeout: float = DEFAULT_SEND_TIMEOUT) -> None:
        self.address = address
        self.send_timeout = send_timeout
        self._pid = os.getpid()
        self._sock: socket.socket | None = None
        self._failed = False
        self._warned = False

    @property
    def failed(self) -> bool:
        """True once this process has given up on the writer."""
        return self._failed and self._pid == os.getpid()

    def send(self, frame: bytes) -> bool:
        """Send one whole frame; False means the caller must put the record elsewhere."""
        pid = os.getpid()
        if pid != self._pid:
            self._forget_parent(pid)
        if self._failed:
            return False
        sock = self._sock
        if sock is None:
            sock = self._sock = self._connect()
            if sock is None:
                return False
        try:
            sock.sendall(frame, socket.MSG_NOSIGNAL)
        except OSError as exc:  # EPIPE/ECONNRESET: writer died; EAGAIN: send timeout hit
            self._give_up(f"sending failed ({type(exc).__name__}: {exc})")
            return False
        return True

    def _connect(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.send_timeout)
            sock.connect(self.address)
            sock.settimeout(None)
            # A kernel send timeout keeps sends to a live writer as cheap as blocking ones,
            # while a writer that stopped reading cannot block this process for ever.
            seconds = int(self.send_timeout)
            micros = int((self.send_timeout - seconds) * 1e6)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", seconds, micros))
        except OSError as exc:
            sock.close()
            self._give_up(f"cannot connect ({type(exc).__name__}: {exc})")
            return None
        return sock

    def _forget_parent(self, pid: int) -> None:
        # The parent's socket is shared with it: close our copy of the descriptor only (no
        # shutdown), so the parent's stream stays intact, and open our own on first use.
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._pid = pid
        self._failed = False
        self._warned = False

    def _give_up(self, why: str) -> None:
        self._failed = True
        if self._sock is not None:
            self._sock.close()  # the writer discards a partly sent frame at EOF
            self._sock = None
        if not self._warned:
            self._warned = True
            write_stderr(
                f"trainvisor.logging: log writer at {self.address} unreachable: {why}; "
                f"process {os.getpid()} logs to stderr from now on\n"
            )

    def close(self) -> None:
        # In a forked child this closes only the child's copy of the descriptor.
        if self._sock is not None:
            self._sock.close()
        self._sock = None


def write_stderr(text: str) -> None:
    """Best effort: stderr may be closed or replaced; losing this must not raise into logging."""
    stream = sys.stderr
    try:
        if stream is not None:
            stream.write(text)
            stream.flush()
            return
    except (OSError, ValueError):
        pass
    try:
        os.write(2, text.encode("utf-8", "backslashreplace"))
    except OSError:
        pass
