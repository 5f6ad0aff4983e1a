"""The one writer: owns the log file, does rotation, and receives records from every process.

A daemon thread in the process that starts the server accepts connections on a Unix stream
socket in a private directory beside the log file (the run directory: a trainvisor killed by
a signal leaves nothing in /tmp, and the file's next writer removes what it left) and appends
whole frames to the file. Only this thread touches the file, so records never interleave and
rotation happens exactly once; the server holds the file's `WriterLock` for its whole life, so
no other process writes it. After each write it tells every sender how many of its records are
in the file (an ack), so a sender can re-send the rest to the next writer if this one dies.
"""
from __future__ import annotations

import atexit
import os
import selectors
import shutil
import socket
import tempfile
import threading
import time
from typing import Any

from ..stderr_gate import write_all as _write_all
from .forks import LIVE as _LIVE, after_in_child, after_in_parent, before, close_all_at_exit
from .ledger import Ledger, Recovery
from .lockfile import WriterLock, acquire, remove_stale_directory
from .protocol import ENV_VAR, FrameDecoder, ProtocolError, SenderCell, final_acks, send_acks
from .rotation import LogWriterError, Mark, RotatingFile, warn as _warn
from .target import MAX_SOCKET_PATH, LogTarget, bind_listener, same_user, write_target

__all__ = ["LogWriterError", "LogWriterServer", "RotatingFile"]

_SOCKET_NAME = "log.sock"
_DIR_PREFIX = ".tvlog-"
_RECV_BYTES = 256 * 1024
_COALESCE_BYTES = 64 * 1024
_COALESCE_SECONDS = 0.002  # at most this much added latency while records trickle in
_DRAIN_SECONDS = 5.0
_FINAL_ACK_SECONDS = 1.0
_OWED_RETRY = 0.01  # how soon an ack that did not fit is tried again


class LogWriterServer:
    """Owns one log file and the socket every logging process connects to.

    Start with `LogWriterServer.start(path)`; give children `server.env` (the address in
    `TRAINVISOR_LOG_ADDRESS`); `close()` drains every connection, stops the thread and
    removes the socket. Forked children silently drop their copies of its descriptors.
    """

    def __init__(self, file: RotatingFile, *, directory: str, lock: WriterLock,
                 ledger: Ledger | None = None, senders: dict[int, tuple[int, int]] | None = None,
                 recovery: Recovery | None = None) -> None:
        self.file = file
        file.ledger = ledger
        self.recovery = recovery or Recovery()  # what it found of a killed predecessor's last write
        self._ledger = ledger
        self._senders: dict[int, SenderCell] = {t: [count, slot] for t, (slot, count) in (senders or {}).items()}
        self.lock = lock
        self.directory = directory
        self.address = os.path.join(directory, _SOCKET_NAME)
        self._owner_pid = os.getpid()
        self._lock = threading.Lock()  # guards descriptor set changes against a concurrent fork
        self._closed = False
        self._torn = 0
        self.close_at_exit = True
        self.records_to_stderr = True
        """When the file cannot be written: True sends the records to stderr (a user's own log stays
        visible somewhere); False drops them with one warning until the file can be written again
        (a supervised run's log, whose stderr is the training's)."""
        self.warn_on_drop = True
        self._dropping = False
        self._written_since_drop = 0
        self._connections: dict[socket.socket, FrameDecoder] = {}
        self._owed: set[socket.socket] = set()  # senders whose last ack found their buffer full
        self._told_all = True
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        try:
            self._abstract = bind_listener(self._listener, self.address)
            self._listener.listen(socket.SOMAXCONN)
            self._listener.setblocking(False)
            self._wake_r.setblocking(False)
            self._selector.register(self._listener, selectors.EVENT_READ, None)
            self._selector.register(self._wake_r, selectors.EVENT_READ, None)
            # Clients given only the address learn the file here, so they can take over too.
            write_target(directory, LogTarget(os.path.realpath(file.path), file.max_bytes,
                                              file.backup_count, os.path.dirname(directory)))
            lock.publish(self.address)
        except BaseException:
            for closable in (self._selector, self._listener, self._wake_r, self._wake_w):
                closable.close()
            raise
        self._closing = threading.Event()  # close() ends a coalescing pause at once: no exit waits it out
        self._thread = threading.Thread(target=self._run, name="trainvisor-log-writer", daemon=True)
        _LIVE.add(self)
        self._thread.start()

    @classmethod
    def start(cls, filename: str | os.PathLike[str], *, mode: str = "a", maxBytes: int = 0,
              backupCount: int = 10, socket_dir: str | os.PathLike[str] | None = None,
              lock: WriterLock | None = None) -> "LogWriterServer":
        """Open `filename` and start receiving records for it.

        `lock` is the file's writer lock, already acquired (by the handler's election);
        without it, it is taken here and a file another process writes is refused.
        The socket lives in a fresh private (0700) directory under `socket_dir` (default: the log
        file's, so a SIGKILL leaves nothing in /tmp; a path there too long for a socket binds it
        in the abstract namespace), removed by `close()`, or by the next writer after a SIGKILL."""
        where = socket_dir if socket_dir is not None else os.path.dirname(os.path.abspath(os.fspath(filename)))
        try:
            if socket_dir is None:  # the log file's folder: made now, not only when the lock is taken
                os.makedirs(where, exist_ok=True)
            directory = tempfile.mkdtemp(prefix=_DIR_PREFIX, dir=where)
        except OSError as exc:
            raise LogWriterError(f"cannot create a socket directory in {where}: {exc}") from exc
        if socket_dir is not None and len(os.path.join(directory, _SOCKET_NAME).encode()) > MAX_SOCKET_PATH:
            os.rmdir(directory)
            raise LogWriterError(f"socket directory path too long for a Unix socket: {directory}")
        ledger: Ledger | None = None
        try:
            lock = lock or acquire(filename)
            remove_stale_directory(lock, directory, _DIR_PREFIX)
            ledger, recovery, senders = _open_ledger(lock, filename, emptied=mode == "w" and not maxBytes > 0)
            file = RotatingFile(filename, mode=mode, max_bytes=maxBytes, backup_count=backupCount)
        except (OSError, LogWriterError) as exc:
            os.rmdir(directory)
            if ledger is not None:
                ledger.close()
            if lock is not None:
                lock.close()
            if isinstance(exc, LogWriterError):
                raise
            raise LogWriterError(f"cannot open log file {filename}: {exc}") from exc
        try:
            return cls(file, directory=directory, lock=lock, ledger=ledger, senders=senders, recovery=recovery)
        except BaseException:
            file.close()
            if ledger is not None:
                ledger.close()
            lock.close()
            shutil.rmtree(directory, ignore_errors=True)
            raise

    @property
    def env(self) -> dict[str, str]:
        """What to add to a child's environment so its Python processes can `attach()`."""
        return {ENV_VAR: self.address}

    @property
    def filename(self) -> str:
        return self.file.path

    @property
    def rotations(self) -> int:
        return self.file.rotations

    @property
    def torn_records(self) -> int:
        """Records cut off by a sender that died or gave up mid-send: discarded, never written."""
        return self._torn

    @property
    def closed(self) -> bool:
        return self._closed

    # -- the writer thread -------------------------------------------------------------

    def _run(self) -> None:
        try:
            stopping = False
            while not stopping:
                batch: list[bytes] = []
                marks: list[Mark] = []
                senders: list[tuple[socket.socket, FrameDecoder]] = []
                received = 0
                events = self._selector.select(_OWED_RETRY if self._owed else None)
                woke = time.monotonic()
                for key, _ in events:
                    sock = key.fileobj
                    if sock is self._listener:
                        self._accept()
                    elif sock is self._wake_r:
                        stopping = True
                    else:
                        received += self._read(sock, key.data, batch, marks)  # type: ignore[arg-type]
                        senders.append((sock, key.data))  # type: ignore[arg-type]
                if batch:
                    self._write(batch, marks)
                # Every sender read from is acked, even one whose records were all skipped (re-sent
                # ones the file holds): it waits for that ack, or would re-send them once more.
                told = dict(senders)  # and those still owed one: the owed are those it did not fit now
                told.update((c, self._connections[c]) for c in self._owed if c in self._connections)
                self._owed = set(send_acks(list(told.items())))
                pause = _COALESCE_SECONDS - (time.monotonic() - woke)
                if 0 < received < _COALESCE_BYTES and pause > 0 and not stopping:
                    # Let records pile up for a moment: one wake-up, recv and write per
                    # batch instead of per record is what makes the single writer keep up.
                    # A round that took that long already (its host's own threads held the
                    # GIL) has coalesced enough: another wait for the GIL would only add delay.
                    self._closing.wait(pause)
            self._drain()
        except Exception as exc:  # the writer must report, never take the process down
            _warn(f"log writer for {self.file.path} failed: {type(exc).__name__}: {exc}")
        finally:
            self._release()

    def _accept(self) -> None:
        while True:
            # Accepted and registered under the lock a fork takes: a child forked in between would
            # inherit a connection it does not know of, keep its socket open after we die, and the
            # sender would go on filling a buffer nobody reads instead of falling back.
            with self._lock:
                try:
                    conn, _ = self._listener.accept()
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as exc:  # e.g. EMFILE: keep serving the connections we have
                    _warn(f"cannot accept a log connection: {exc}")
                    return
                if self._abstract and not same_user(conn):
                    conn.close()  # an abstract socket has no file mode: whoever else connects is refused here
                    continue
                conn.setblocking(False)
                decoder = FrameDecoder(self._sender)
                self._connections[conn] = decoder
                self._selector.register(conn, selectors.EVENT_READ, decoder)

    def _sender(self, token: int) -> SenderCell:
        """A sender's count, shared by its connections (one re-sending after a timeout may
        still have records in flight on its old one); kept in the ledger while it has a slot."""
        cell = self._senders.get(token)
        if cell is None:
            slot, evicted = self._ledger.claim(token) if self._ledger is not None else (-1, None)
            if evicted in self._senders:
                self._senders[evicted][1] = -1  # still skipped here; no longer after a kill
            cell = self._senders[token] = [0, slot]
        return cell

    def _read(self, conn: socket.socket, decoder: FrameDecoder, batch: list[bytes], marks: list[Mark], *,
              until: float | None = None) -> int:
        """Move whole records from `conn` into `batch`; return the bytes received. With
        `until` (a monotonic deadline), keep reading until the socket is empty or time is up."""
        received = 0
        while True:
            try:
                data = conn.recv(_RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                return received
            except OSError:
                data = b""
            if not data:
                self._drop(conn, decoder)
                return received
            received += len(data)
            try:
                records = decoder.feed(data)
            except ProtocolError as exc:
                _warn(f"dropping a log connection that sent garbage: {exc}")
                self._drop(conn, decoder, torn=False)
                return received
            if records:
                start = len(batch)
                batch += records
                cell = decoder.sender
                if cell is not None and cell[1] >= 0:
                    marks.append((start, len(batch), cell[1], cell[0]))
            if until is None:
                if len(data) < _RECV_BYTES:
                    return received
            elif time.monotonic() > until:
                return received

    def _write(self, payloads: list[bytes], marks: list[Mark]) -> None:
        try:
            self.file.write_records(payloads, self._lock, marks)
        except OSError as exc:  # disk full, file removed
            if not self.records_to_stderr:
                if not self._dropping and self.warn_on_drop:
                    _warn(f"cannot write {self.file.path} ({exc.strerror or exc}); going on without it")
                self._dropping, self._written_since_drop = True, 0
                return
            _warn(f"cannot write {self.file.path}: {exc}; records follow on stderr")
            try:
                _write_all(2, b"".join(payloads))
            except OSError:
                pass
            return
        if self._dropping:
            # A full disk takes small batches between failed big ones (a failed write is cut
            # back): only a megabyte written since says it is usable again, and warns anew.
            self._written_since_drop += sum(map(len, payloads))
            if self._written_since_drop >= 1 << 20:
                self._dropping = False

    def _drop(self, conn: socket.socket, decoder: FrameDecoder, *, torn: bool = True) -> None:
        if torn and decoder.pending:
            self._torn += 1  # a sender died or gave up mid-record; it re-sent that record to stderr
        with self._lock:
            self._selector.unregister(conn)
            del self._connections[conn]
            self._owed.discard(conn)
            conn.close()

    def _drain(self) -> None:
        """Everything a client sent before close() began is already in a socket buffer."""
        self._accept()
        until = time.monotonic() + _DRAIN_SECONDS  # a sender that never pauses cannot hold close() up
        for conn, decoder in list(self._connections.items()):
            batch: list[bytes] = []
            marks: list[Mark] = []
            self._read(conn, decoder, batch, marks, until=until)
            if batch:
                self._write(batch, marks)
        # The last acks must arrive: a sender that misses one re-sends those records to the next
        # writer, which (its ledger gone with a clean close) would write them twice.
        # One that cannot be told keeps the ledger for the next writer (the lock file stays).
        self._told_all = final_acks(list(self._connections.items()), time.monotonic() + _FINAL_ACK_SECONDS)

    def _release(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
            self._selector.close()
            self._listener.close()
            self._wake_r.close()
            self.file.close()
            if self._ledger is not None:
                self._ledger.close()
            # only now may another process become the writer; the ledger goes with the lock
            # file, unless a sender was not told what the file holds
            self.lock.close(keep_file=not self._told_all)
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- lifecycle ---------------------------------------------------------------------

    def close(self, timeout: float | None = 30.0) -> None:
        """Write what every client has sent so far, stop, and remove the socket.

        A no-op in a forked child: only the process that started the writer stops it."""
        if self._closed or os.getpid() != self._owner_pid:
            return
        self._closed = True
        self._closing.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self._wake_w.close()
        _LIVE.discard(self)

    def _forget_in_child(self) -> None:
        """After fork: close the inherited descriptors (else a dead writer's clients would
        never see EOF) without touching the file or the socket path the parent still uses."""
        self._closed = True
        self._lock = threading.Lock()
        for conn in self._connections:
            conn.close()
        self._connections.clear()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()
        self.file.close()
        if self._ledger is not None:
            self._ledger.close()  # our copy of the mapping only
        self.lock.forget()

    def __enter__(self) -> "LogWriterServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<LogWriterServer {self.file.path!r} at {self.address!r} {state}>"


def _open_ledger(lock: WriterLock, filename: str | os.PathLike[str], *, emptied: bool
                 ) -> tuple[Ledger | None, Recovery | None, dict[int, tuple[int, int]] | None]:
    """The file's ledger, settled (see `Ledger.recover`); none on a disk with no room for it: the
    writer then works as before it had one (a record re-sent after a kill may be written twice)."""
    try:
        ledger = Ledger(lock.fd)
    except OSError:
        return None, None, None
    if emptied:
        ledger.reset()  # the file is emptied: nothing in it to recognise
    recovery, senders = ledger.recover(os.path.realpath(os.fspath(filename)))
    return ledger, recovery, senders


os.register_at_fork(before=before, after_in_parent=after_in_parent, after_in_child=after_in_child)
atexit.register(close_all_at_exit)
