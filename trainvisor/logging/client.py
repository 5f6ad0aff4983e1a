"""One process's connection to the writer: opened lazily, re-opened after fork, and kept
until the writer has acked each record, so that if the writer dies the records it had not
written are re-sent to its successor (a connection that knows the file elects one; one that
only knows an address gives up with one warning and logs to stderr from then on)."""
from __future__ import annotations

import collections
import os
import socket
import struct
import sys
import threading
import time
from typing import Callable

from .election import LogTarget, elect
from .protocol import ACK, hello_frame
from .rotation import LogWriterError
from .target import connectable
from .writer import LogWriterServer

__all__ = ["WriterConnection", "DEFAULT_SEND_TIMEOUT", "OWNING", "write_stderr"]

#: How long one record may wait for a writer that stopped reading before it is given up on.
DEFAULT_SEND_TIMEOUT = 10.0
_ACK_EVERY = 256  # records between two non-blocking looks at the writer's acks
_MAX_UNACKED = 65_536  # beyond this many, wait for the writer (it is behind)
# Each small send is its own buffer in the kernel (~0.7 KiB of accounting for a 100-byte
# record), so the default 208 KiB send buffer blocks a sender after ~280 records whenever
# the writer's thread waits a few ms for its host process's GIL (measured with 4 processes
# each building its own handler: every sender blocked 20-50 times, 0.3-1 s in all; with this,
# never). The kernel doubles the request and caps it at net.core.wmem_max; it is only used
# while the writer is behind, and what it holds is also kept in the unacked queue.
_SEND_BUFFER_BYTES = 1 << 20

#: Connections whose process runs their writer: kept alive (and closed) until logging shuts down.
OWNING: set["WriterConnection"] = set()
_OWNING_LOCK = threading.Lock()


class WriterConnection:
    """Sends frames to the writer of `target` (elected on first use) or at `address`.
    Not thread-safe: callers hold a lock (the handler's), which the logging module
    re-initialises in a forked child."""

    def __init__(self, address: str | None, *, target: LogTarget | None = None, mode: str = "a",
                 send_timeout: float = DEFAULT_SEND_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.address = address
        self.target = target
        self.send_timeout = send_timeout
        self.server: LogWriterServer | None = None
        self.on_open: Callable[[], None] | None = None  # the handler's per-process set-up
        self.resent = 0  # records re-sent to a new writer (a dead one's unacked records)
        self._mode = mode  # honoured by the first election only: a successor never truncates
        self._clock = clock
        self._pid = os.getpid()
        self._sock: socket.socket | None = None
        self._failed = False
        self._warned = False
        self._unacked: collections.deque[bytes] = collections.deque()
        self._acked = 0  # records of this connection the writer has acked
        self._sent = 0
        self._ack_buffer = b""
        self._token = _new_token()  # this process's name in the writer's ledger
        self._acked_total = 0  # records acked by every writer so far: the first unacked one's number

    @property
    def failed(self) -> bool:
        """True once this process has given up on the writer."""
        return self._failed and self._pid == os.getpid()

    def elect_now(self) -> tuple[str, LogWriterServer | None]:
        """Find or become the writer of `target` now; LogWriterError if the file cannot be
        written (the handler's constructor raises it, as RotatingFileHandler's would)."""
        assert self.target is not None
        address, server = elect(self.target, mode=self._mode, timeout=self.send_timeout)
        self._mode = "a"
        self.address = address
        if server is not None:
            self._own(server)
        return address, server

    def send(self, frame: bytes) -> bool:
        """Send one whole frame; False means the caller must put the record elsewhere."""
        if os.getpid() != self._pid:
            self._forget_parent()
        sock = self._sock
        if sock is None:
            if self._failed:
                return False
            sock = self._sock = self._open()
            if sock is None:
                return False
        try:
            sock.sendall(frame, socket.MSG_NOSIGNAL)
        except OSError as exc:  # EPIPE/ECONNRESET: writer gone; EAGAIN: send timeout hit
            return self._recover([frame], f"sending failed ({type(exc).__name__}: {exc})")
        self._unacked.append(frame)
        self._sent += 1
        if self._sent % _ACK_EVERY == 0:
            self._read_acks(block=len(self._unacked) > _MAX_UNACKED)
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the writer has every record sent so far in the file (re-sending to a
        new writer if it dies meanwhile); False if that did not happen within `timeout`."""
        if os.getpid() != self._pid or self._sock is None:
            return not self._unacked
        deadline = self._clock() + (self.send_timeout if timeout is None else timeout)
        while self._unacked and self._sock is not None and self._clock() < deadline:
            self._read_acks(block=True, timeout=min(0.5, max(0.001, deadline - self._clock())))
        return not self._unacked

    # -- acks ----------------------------------------------------------------------------

    def _read_acks(self, *, block: bool, timeout: float | None = None) -> None:
        sock = self._sock
        assert sock is not None
        try:
            if block:
                sock.settimeout(self.send_timeout if timeout is None else timeout)
                data = sock.recv(65536)
            else:
                data = sock.recv(65536, socket.MSG_DONTWAIT)
        except (BlockingIOError, socket.timeout):
            return
        except OSError:
            data = b""
        finally:
            if block:
                sock.settimeout(None)
        if not data:  # the writer closed or died: what it never acked goes to its successor
            self._recover([], "the writer closed the connection")
            return
        self._take_acks(data)

    def _take_acks(self, data: bytes) -> None:
        buf = self._ack_buffer + data
        whole = len(buf) - len(buf) % ACK.size
        self._ack_buffer = buf[whole:]
        if not whole:
            return
        (count,) = ACK.unpack_from(buf, whole - ACK.size)
        done = min(count - self._acked, len(self._unacked))
        for _ in range(done):
            self._unacked.popleft()
        self._acked = count
        self._acked_total += done

    def _final_acks(self) -> None:
        """A writer that closed cleanly may have acked more before it went: read it all."""
        sock = self._sock
        if sock is None:
            return
        while True:
            try:
                data = sock.recv(65536, socket.MSG_DONTWAIT)
            except OSError:
                return
            if not data:
                return
            self._take_acks(data)

    # -- failover ------------------------------------------------------------------------

    def _recover(self, frames: list[bytes], why: str) -> bool:
        self._final_acks()
        self._close_socket()
        pending = list(self._unacked) + frames
        self._unacked.clear()
        self._acked = self._sent = 0
        self._ack_buffer = b""
        if self.target is None:
            self._give_up(why)
            return not frames  # records the dead writer had not written die with it
        deadline = self._clock() + self.send_timeout
        while self._clock() < deadline:
            sock = self._open()
            if sock is None:
                break
            try:
                sock.sendall(b"".join(pending), socket.MSG_NOSIGNAL)
            except OSError:
                sock.close()  # the successor died too: elect again
                continue
            self._sock = sock
            self._unacked.extend(pending)
            self._sent = len(pending)
            self.resent += len(pending) - len(frames)
            return True
        self._give_up(why)
        write_stderr(b"".join(f[4:] for f in pending).decode("utf-8", "replace"))
        return True

    def _open(self) -> socket.socket | None:
        if self.target is None:
            assert self.address is not None
            return self._connect(self.address, give_up=True)
        deadline = self._clock() + self.send_timeout
        while True:
            try:
                address, server = elect(self.target, mode=self._mode, timeout=self.send_timeout)
            except LogWriterError as exc:
                self._give_up(str(exc))
                return None
            self._mode = "a"
            if server is not None:
                self._own(server)
            sock = self._connect(address, give_up=self._clock() > deadline)
            if sock is not None or self._failed:
                self.address = address
                if sock is not None and self.on_open is not None:
                    self.on_open()
                return sock
            time.sleep(0.002)  # the writer died after publishing: elect again

    def _own(self, server: LogWriterServer) -> None:
        self.server = server
        with _OWNING_LOCK:
            OWNING.add(self)

    def _connect(self, address: str, *, give_up: bool) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.send_timeout)
            sock.connect(connectable(address))
            sock.settimeout(None)
            # A kernel send timeout keeps sends to a live writer as cheap as blocking ones,
            # while a writer that stopped reading cannot block this process for ever.
            seconds = int(self.send_timeout)
            micros = int((self.send_timeout - seconds) * 1e6)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", seconds, micros))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUFFER_BYTES)
            # Who we are and the number of the next record: unacked records re-sent after a
            # writer's death are recognised by its successor, which skips those it has.
            sock.sendall(hello_frame(self._token, self._acked_total), socket.MSG_NOSIGNAL)
        except OSError as exc:
            sock.close()
            if give_up:
                self._give_up(f"cannot connect ({type(exc).__name__}: {exc})")
            return None
        return sock

    def _forget_parent(self) -> None:
        # The parent's socket is shared with it: close our copy of the descriptor only (no
        # shutdown), so the parent's stream stays intact, and open our own on first use.
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._pid = os.getpid()
        self.server = None  # the parent's writer; the fork hook closed our copies of its files
        self._mode = "a"
        self._failed = self._warned = False
        self._unacked = collections.deque()  # the parent's records: the parent's to re-send
        self._acked = self._sent = 0
        self._ack_buffer = b""
        self._token = _new_token()
        self._acked_total = 0

    def _give_up(self, why: str) -> None:
        self._failed = True
        self._close_socket()
        if not self._warned:
            self._warned = True
            write_stderr(
                f"trainvisor.logging: log writer at {self.address} unreachable: {why}; "
                f"process {os.getpid()} logs to stderr from now on\n"
            )

    def _close_socket(self) -> None:
        if self._sock is not None:
            self._sock.close()  # the writer discards a partly sent frame at EOF
            self._sock = None

    def close(self) -> None:
        """Close this process's connection, and its writer if it runs one. In a forked
        child this closes only the child's copies of the descriptors."""
        if os.getpid() != self._pid:
            self._forget_parent()
        self._close_socket()
        if self.server is not None:
            self.server.close()  # kept: its figures (rotations, torn records) stay readable
        with _OWNING_LOCK:
            OWNING.discard(self)


def _new_token() -> int:
    return int.from_bytes(os.urandom(8), "little") or 1  # 0 marks a free ledger slot


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
