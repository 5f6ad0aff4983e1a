"""`MultiProcessingLogHandler`: the AVA SDK's constructor, without its faults.

Each process formats its own records (tracebacks and stack included) and sends each one
whole, synchronously, to the single writer: when `emit` returns the record is in the
kernel, so neither `sys.exit`, an uncaught exception nor `os._exit` in a multiprocessing
child can lose it while the writer lives; and the process keeps it until the writer acks
it, so a writer's death cannot lose it either (it goes to the next writer).
"""
from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import Any

from .client import DEFAULT_SEND_TIMEOUT, OWNING, WriterConnection, write_stderr
from .election import LogTarget
from .target import read_target
from .protocol import ENV_VAR, encode_frame
from .rotation import LogWriterError
from .writer import LogWriterServer

__all__ = ["MultiProcessingLogHandler"]


class MultiProcessingLogHandler(logging.Handler):
    """Log to one file from any number of processes (fork, spawn, forkserver, pools, or
    unrelated processes that each create their own handler for the same file).

    `RotatingFileHandler`'s signature, so it drops into code and `dictConfig` files written
    for it (`encoding=None` means UTF-8; `errors=None` means backslashreplace, so a record is
    never dropped for one character). For the file there is one writer: the first handler
    takes the lock beside the log and runs it (then, with `export_env`, names it in
    `TRAINVISOR_LOG_ADDRESS` so spawned children can `attach()`); every other handler, in
    this process or any other, sends to it; if it dies, a remaining handler takes over.
    `mode='w'` truncates only when the file has no writer yet, and never on takeover.
    Forked children use it as inherited; it also pickles, as a client of the same file.
    """

    def __init__(self, filename: str | os.PathLike[str], mode: str = "a", maxBytes: int = 0,
                 backupCount: int = 0, encoding: str | None = None, delay: bool = False,
                 errors: str | None = None, *, export_env: bool = True,
                 send_timeout: float = DEFAULT_SEND_TIMEOUT,
                 socket_dir: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        if mode not in ("a", "w"):
            raise LogWriterError(f"log file mode must be 'a' or 'w', not {mode!r}")
        self.baseFilename = os.path.abspath(os.fspath(filename))
        self.mode, self.maxBytes, self.backupCount, self.delay = mode, maxBytes, backupCount, delay
        self.encoding, self.errors = encoding, errors
        self._previous_env: str | None = None
        self._exported = False
        self._export_env = export_env
        target = LogTarget.of(filename, maxBytes, backupCount, socket_dir)
        self._set_connection(WriterConnection(None, target=target, mode=mode, send_timeout=send_timeout))
        if not delay:
            self._start()

    def _set_connection(self, connection: WriterConnection) -> None:
        self.connection = connection
        connection.on_open = self._on_open
        self._finish_pid = -1
        self._codec = (self.encoding or "utf-8", self.errors or "backslashreplace")

    def _start(self) -> None:
        """Elect the writer now, as RotatingFileHandler opens its file now: an unusable
        path is an error here, not a stream of stderr records later."""
        address, server = self.connection.elect_now()
        self._on_open()  # a worker that became the writer hands it over at exit, logged or not
        if server is not None and self._export_env:
            self._previous_env = os.environ.get(ENV_VAR)
            os.environ[ENV_VAR] = address
            self._exported = True

    @classmethod
    def connect(cls, address: str, *, level: int = logging.NOTSET,
                formatter: logging.Formatter | None = None,
                send_timeout: float = DEFAULT_SEND_TIMEOUT, take_over: bool = True) -> "MultiProcessingLogHandler":
        """A handler that sends to the writer at `address`. That writer names its file beside
        its socket, so when it closes or dies this handler takes over like any other (with
        `take_over=False`, or a writer that names no file, it logs to stderr from then on)."""
        self = cls.__new__(cls)
        logging.Handler.__init__(self, level)
        self.baseFilename, self.mode, self.maxBytes, self.backupCount = None, "a", 0, 0
        self.encoding = self.errors = None
        self.delay, self._export_env, self._previous_env, self._exported = False, False, None, False
        target = read_target(address) if take_over else None
        self._set_connection(WriterConnection(address, target=target, send_timeout=send_timeout))
        if formatter is not None:
            self.setFormatter(formatter)
        return self

    @property
    def address(self) -> str | None:
        """The writer's socket; None before a `delay`ed handler's first record."""
        return self.connection.address

    @property
    def server(self) -> LogWriterServer | None:
        """The writer, in the process that runs it."""
        return self.connection.server

    @property
    def filename(self) -> str | None:
        """The log path (absolute); None for a handler made by `connect()`."""
        return self.baseFilename

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            frame = encode_frame(text + "\n", *self._codec)
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)
            return
        if not self.connection.send(frame):
            write_stderr(text + "\n")

    def flush(self) -> None:
        """Wait until the writer has written every record this process sent (each one is
        in the kernel already when `emit` returns; this also survives a writer's death)."""
        self.acquire()
        try:
            self.connection.flush()
        finally:
            self.release()

    def _on_open(self) -> None:
        """multiprocessing children end in os._exit, past atexit and logging.shutdown:
        its own exit hook is where such a child waits for its acks and hands over its writer."""
        mp = sys.modules.get("multiprocessing")
        if mp is None or mp.parent_process() is None or self._finish_pid == os.getpid():
            return
        import multiprocessing.util

        self._finish_pid = os.getpid()
        multiprocessing.util.Finalize(None, self.close, exitpriority=10)

    def close(self) -> None:
        self.acquire()
        try:
            if self.connection.target is not None:
                self.connection.flush()
            self.connection.close()
        finally:
            self.release()
        if self._exported and os.environ.get(ENV_VAR) == self.address:
            if self._previous_env is None:
                os.environ.pop(ENV_VAR, None)
            else:
                os.environ[ENV_VAR] = self._previous_env
        self._exported = False
        super().close()

    def __reduce__(self) -> tuple[Any, ...]:
        # For spawn/forkserver children: a client of the same file, which may take over.
        return (_client, (self.address, self.level, self.formatter, self.connection.send_timeout,
                          self.connection.target, self.baseFilename, self._codec))

    def __repr__(self) -> str:
        where = self.filename or self.address
        return f"<{type(self).__name__} {where} ({logging.getLevelName(self.level)})>"


def _client(address: str | None, level: int, formatter: logging.Formatter | None, send_timeout: float,
            target: LogTarget | None, filename: str | None, codec: tuple[str, str]) -> MultiProcessingLogHandler:
    handler = MultiProcessingLogHandler.connect(address or "", level=level, formatter=formatter,
                                                send_timeout=send_timeout)
    handler.baseFilename = filename
    handler.connection.target = target
    handler._codec = codec
    return handler


def _join_children_before_shutdown() -> None:
    """multiprocessing joins non-daemon children in its own exit hook, which may run after
    logging.shutdown() closes our writer; join them first so what they log still lands."""
    if not OWNING or "multiprocessing" not in sys.modules:
        return
    import multiprocessing

    for child in multiprocessing.active_children():
        if not child.daemon:
            child.join()


atexit.register(_join_children_before_shutdown)
