"""Installing the handler on the root logger: for the process that owns the log
(`initialize_logger`) and for any process that finds the writer in the environment (`attach`)."""
from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path
from types import TracebackType

from .handler import MultiProcessingLogHandler
from .protocol import ENV_VAR

__all__ = ["DEFAULT_FORMAT", "attach", "initialize_logger", "log_uncaught_exceptions"]

#: The AVA SDK's layout, plus the pid: several processes share the file.
DEFAULT_FORMAT = ("[%(asctime)s] [%(levelname)s] [%(process)d %(threadName)s/%(filename)s:%(lineno)s"
                  " - %(funcName)s()] %(node)s%(message)s")


class _NodeFormatter(logging.Formatter):
    """Fills `%(node)s` with "Node[N] " for distributed runs, "" otherwise."""

    def __init__(self, fmt: str = DEFAULT_FORMAT, *, node: object = None) -> None:
        super().__init__(fmt, defaults={"node": "" if node is None else f"Node[{node}] "})


def initialize_logger(workdir: str | os.PathLike[str], node: object = None, debug: bool = False, *,
                      filename: str = "run.log", maxBytes: int = 50 * 1024 * 1024,
                      backupCount: int = 10, stream: bool = True) -> logging.Logger:
    """The AVA SDK's set-up: root logger to stderr and to `<workdir>/run.log` (rotated),
    "Node[N]" in each line when `node` is given, DEBUG when `debug`. Calling it again for
    the same file keeps the running writer; uncaught exceptions are logged before exit."""
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    formatter = _NodeFormatter(node=node)
    path = os.path.abspath(Path(workdir) / filename)
    keep: MultiProcessingLogHandler | None = None
    for handler in list(root.handlers):
        if isinstance(handler, MultiProcessingLogHandler) and handler.filename == path and keep is None:
            keep = handler
            continue
        root.removeHandler(handler)
        if isinstance(handler, MultiProcessingLogHandler):
            handler.close()  # its writer would otherwise hold records nobody flushes
    if stream:
        console = logging.StreamHandler()
        console.setFormatter(formatter)
        root.addHandler(console)
    if keep is None:
        keep = MultiProcessingLogHandler(path, maxBytes=maxBytes, backupCount=backupCount)
        root.addHandler(keep)
    keep.setFormatter(formatter)
    log_uncaught_exceptions()
    return root


def attach(address: str | None = None, *, logger: logging.Logger | None = None,
           level: int | None = logging.INFO, fmt: str = DEFAULT_FORMAT, node: object = None,
           capture_uncaught: bool = True, take_over: bool = True) -> MultiProcessingLogHandler | None:
    """Send this process's logging to the writer named by `address` or `TRAINVISOR_LOG_ADDRESS`.

    For processes nobody handed the handler to: spawned workers (`Pool(initializer=attach)`)
    and the training program's own processes under `trainvisor run`. Returns None when no
    writer is named; returns the existing handler when this logger already sends there.
    If that writer closes or dies, the handler takes over its file (see `connect`)."""
    address = address or os.environ.get(ENV_VAR)
    if not address:
        return None
    target = logger if logger is not None else logging.getLogger()
    if level is not None:
        target.setLevel(level)
    for handler in target.handlers:
        if isinstance(handler, MultiProcessingLogHandler) and handler.address == address:
            return handler
    handler = MultiProcessingLogHandler.connect(address, formatter=_NodeFormatter(fmt, node=node),
                                                take_over=take_over)
    target.addHandler(handler)
    if capture_uncaught:
        log_uncaught_exceptions()
    return handler


_installed = False


def log_uncaught_exceptions() -> None:
    """Log uncaught exceptions (main and other threads) before Python prints them, so a
    process dying of one leaves its traceback in the shared log. Installed once."""
    global _installed
    if _installed:
        return
    _installed = True
    previous_hook = sys.excepthook
    previous_thread_hook = threading.excepthook

    def excepthook(exc_type: type[BaseException], exc: BaseException,
                   tb: TracebackType | None) -> None:
        if not issubclass(exc_type, KeyboardInterrupt):
            logging.getLogger("trainvisor.uncaught").critical(
                "uncaught exception, process %d exits", os.getpid(), exc_info=(exc_type, exc, tb))
        previous_hook(exc_type, exc, tb)

    def thread_excepthook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is not SystemExit and args.exc_value is not None:
            name = args.thread.name if args.thread is not None else "?"
            logging.getLogger("trainvisor.uncaught").critical(
                "uncaught exception in thread %s", name,
                exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
        previous_thread_hook(args)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
