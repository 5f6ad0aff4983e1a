"""trainvisor's own logging for the length of a run.

Its records go to the run directory's log (a multiprocess log writer that the training's Python
processes can join too), its warnings to stderr unless quiet. Other libraries' loggers (watchdog,
botocore, urllib3, qiniu) write to the run log only, never to stderr: stderr carries the training's
bytes unchanged, so logging's last-resort handler must never fire, and Python warnings raised by
libraries during the run are logged, not printed.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping, Optional

from ..secrets import mask_text
from ..stderr_gate import STDERR

__all__ = ["RunLogging", "RUN_LOG_NAME", "MaskingFormatter", "OneLineFormatter"]

RUN_LOG_NAME = "train.log"
_FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"


class RunLogging:
    """Installed by `start`, removed by `close`; `env` lets the child's processes log into the run log."""

    def __init__(self, server: object, own: list[logging.Handler], library: logging.Handler) -> None:
        self._server = server
        self._own = own
        self._library = library

    @classmethod
    def start(cls, run_dir: Optional[Path], *, quiet: bool) -> "RunLogging":
        root = logging.getLogger("trainvisor")
        root.setLevel(logging.INFO)
        root.propagate = False
        for h in list(root.handlers):
            root.removeHandler(h)
            h.close()
        server, own, library = None, [], logging.NullHandler()
        if run_dir is not None:
            from ..logging import LogWriterServer, MultiProcessingLogHandler

            server = LogWriterServer.start(run_dir / RUN_LOG_NAME, maxBytes=64 << 20, backupCount=10)
            # Its stderr is the training's: a run log that cannot be written (disk full) is said once,
            # never flooded into the training's output.
            server.records_to_stderr, server.warn_on_drop = False, not quiet
            own.append(MultiProcessingLogHandler.connect(server.address, formatter=MaskingFormatter(_FORMAT)))
            library = MultiProcessingLogHandler.connect(server.address, formatter=MaskingFormatter(_FORMAT))
            library.setLevel(logging.WARNING)
        library.addFilter(_drop_watchdog_stop_race)
        logging.getLogger().addHandler(library)  # so logging.lastResort never prints to stderr
        # A library's warnings.warn (watchdog warns of inotify watch races) would print to stderr,
        # into the training's bytes: route them to the run log instead, for the length of the run.
        logging.captureWarnings(True)
        if not quiet:
            sh = GatedStderrHandler()
            sh.setLevel(logging.WARNING)
            sh.setFormatter(OneLineFormatter("trainvisor: %(message)s"))
            own.append(sh)
        if not own:
            own.append(logging.NullHandler())  # quiet and no run log: nothing, not logging's last resort
        for h in own:
            root.addHandler(h)
        return cls(server, own, library)

    @property
    def env(self) -> Mapping[str, str]:
        return getattr(self._server, "env", None) or {}

    def close(self) -> None:
        logging.captureWarnings(False)
        logging.getLogger().removeHandler(self._library)
        self._library.close()
        root = logging.getLogger("trainvisor")
        for h in self._own:
            root.removeHandler(h)
            h.close()
        if self._server is not None:
            self._server.close()
            self._server = None


def _drop_watchdog_stop_race(record: logging.LogRecord) -> bool:
    """watchdog logs an ERROR when an inotify emitter is stopped while an event arrives
    (trainvisor stops one whenever a watched directory appears and its parent's watch is
    replaced); nothing is lost, so it is not worth an error line in the run log."""
    return not (record.name.startswith("watchdog") and "called when the thread is inactive" in str(record.msg))


class MaskingFormatter(logging.Formatter):
    """The run log's lines, secrets masked (secrets.mask_text): a record's message and its
    traceback may quote a store's URL with its password (botocore's EndpointConnectionError names
    the endpoint), a webhook's, a key. Masked here, where every record of trainvisor and of the
    libraries it loads is written, so no one error path has to remember it."""

    def format(self, record: logging.LogRecord) -> str:
        return mask_text(super().format(record))


class OneLineFormatter(MaskingFormatter):
    """A record as one line: its message, and for a record with an exception the exception's
    type and text when the message does not already say them, then where the traceback is. The
    training's stderr is no place for a traceback (a sink failing on a full disk printed 20
    lines into it); the run log keeps it whole."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(_with_message(record))
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            said = f"{type(exc).__name__}: {exc}"
            text += ("" if said in text else f" ({said})") + " (traceback in the run log)"
        elif record.exc_text:  # a record relayed from another process (the sink host) with its traceback's text
            text += " (traceback in the run log)"
        return mask_text(" ".join(text.splitlines()))


def _with_message(record: logging.LogRecord) -> logging.LogRecord:
    record.message = record.getMessage()
    return record


class GatedStderrHandler(logging.Handler):
    """trainvisor's warnings on stderr, written between the training's lines (stderr_gate.py)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            STDERR.say(self.format(record))
        except Exception:  # as logging.StreamHandler: a broken record must not raise into the run
            self.handleError(record)
