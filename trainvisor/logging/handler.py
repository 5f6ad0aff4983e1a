"""`MultiProcessingLogHandler`: the AVA SDK's constructor, without its faults.

Each process formats its own records (tracebacks and stack included) and sends each one
whole, synchronously, to the single writer: when `emit` returns the record is in the
kernel, so neither `sys.exit`, an uncaught exception nor `os._exit` in a multiprocessing
child can lose it, and there is no per-process buffer to flush at exit.
"""
from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from typing import Any

from .client import DEFAULT_SEND_TIMEOUT, WriterConnection, write_stderr
from .protocol import ENV_VAR, encode_frame
from .writer import LogWriterServer, writer_for_file

__all__ = ["MultiProcessingLogHandler"]

# Handlers that own a writer stay alive until closed: logging.shutdown() only holds weak
# references, and a collected owner would take unsent records down with its daemon thread.
_OWNERS: set["MultiProcessingLogHandler"] = set()
_OWNERS_LOCK = threading.Lock()


class MultiProcessingLogHandler(logging.Handler):
    """Log to one file from any number of processes (fork, spawn, forkserver, pools).

    The process that creates it starts the writer for `filename` (unless a live writer for
    that file is already named in `TRAINVISOR_LOG_ADDRESS`, in which case it joins it) and,
    with `export_env`, names it in that variable so spawned children can `attach()`.
    Forked children use it as inherited; it also pickles, as a client of the same writer.
    """

    def __init__(self, filename: str | os.PathLike[str], mode: str = "a", maxBytes: int = 0,
                 backupCount: int = 10, *, export_env: bool = True,
                 send_timeout: float = DEFAULT_SEND_TIMEOUT,
                 socket_dir: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        self.server: LogWriterServer | None = None
        self._previous_env: str | None = None
        self._exported = False
        address = writer_for_file(filename)
        if address is None:
            self.server = LogWriterServer.start(filename, mode=mode, maxBytes=maxBytes,
                                                backupCount=backupCount, socket_dir=socket_dir)
            self.server.close_at_exit = False  # closed by logging.shutdown() via close()
            address = self.server.address
            with _OWNERS_LOCK:
                _OWNERS.add(self)
            if export_env:
                self._previous_env = os.environ.get(ENV_VAR)
                os.environ[ENV_VAR] = address
                self._exported = True
        self.connection = WriterConnection(address, send_timeout=send_timeout)

    @classmethod
    def connect(cls, address: str, *, level: int = logging.NOTSET,
                formatter: logging.Formatter | None = None,
                send_timeout: float = DEFAULT_SEND_TIMEOUT) -> "MultiProcessingLogHandler":
        """A handler that only sends to the writer at `address` (it never writes a file)."""
        self = cls.__new__(cls)
        logging.Handler.__init__(self, level)
        self.server = None
        self._previous_env = None
        self._exported = False
        self.connection = WriterConnection(address, send_timeout=send_timeout)
        if formatter is not None:
            self.setFormatter(formatter)
        return self

    @property
    def address(self) -> str:
        return self.connection.address

    @property
    def filename(self) -> str | None:
        """The log path, in the process that owns the writer."""
        return self.server.filename if self.server is not None else None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            frame = encode_frame(text + "\n")
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)
            return
        if not self.connection.send(frame):
            write_stderr(text + "\n")

    def flush(self) -> None:
        """Nothing to do: a record is handed to the kernel before `emit` returns."""

    def close(self) -> None:
        self.acquire()
        try:
            self.connection.close()
        finally:
            self.release()
        if self.server is not None:
            self.server.close()  # no-op in a forked child
            if self._exported and os.environ.get(ENV_VAR) == self.server.address:
                if self._previous_env is None:
                    os.environ.pop(ENV_VAR, None)
                else:
                    os.environ[ENV_VAR] = self._previous_env
            self._exported = False
        with _OWNERS_LOCK:
            _OWNERS.discard(self)
        super().close()

    def __reduce__(self) -> tuple[Any, ...]:
        # For spawn/forkserver children: the same writer, as a client; never a second writer.
        return (_client, (self.address, self.level, self.formatter, self.connection.send_timeout))

    def __repr__(self) -> str:
        where = self.filename or self.address
        return f"<{type(self).__name__} {where} ({logging.getLevelName(self.level)})>"


def _client(address: str, level: int, formatter: logging.Formatter | None,
            send_timeout: float) -> MultiProcessingLogHandler:
    return MultiProcessingLogHandler.connect(address, level=level, formatter=formatter,
                                             send_timeout=send_timeout)


def _join_children_before_shutdown() -> None:
    """multiprocessing joins non-daemon children in its own exit hook, which may run after
    logging.shutdown() closes our writer; join them first so what they log still lands."""
    if not _OWNERS or "multiprocessing" not in sys.modules:
        return
    import multiprocessing

    for child in multiprocessing.active_children():
        if not child.daemon:
            child.join()


atexit.register(_join_children_before_shutdown)
