"""Child-process code for the peer-style stress tests: each worker builds its OWN handler on the
shared file (as concurrent-log-handler's stress test and torchrun ranks calling
initialize_logger do), with nothing inherited from the parent."""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from trainvisor.logging import MultiProcessingLogHandler

from .logging_workers import message

LOGGER = "tvpeer"


def own_logger(path: str, max_bytes: int, backup_count: int, socket_dir: str) -> logging.Logger:
    handler = MultiProcessingLogHandler(path, "a", max_bytes, backup_count, socket_dir=socket_dir)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger(LOGGER)
    log.setLevel(logging.INFO)
    log.propagate = False
    log.handlers[:] = [handler]  # nothing inherited: a fork child starts from its own handler
    return log


def independent_worker(path: str, tag: str, count: int, max_bytes: int, backup_count: int,
                       socket_dir: str, barrier) -> None:
    """Handlers are created at the same instant in every worker: the election is raced.
    The handler closes in multiprocessing's exit hook (handing the writer over if it has it)."""
    barrier.wait()
    log = own_logger(path, max_bytes, backup_count, socket_dir)
    for seq in range(count):
        log.info(message(tag, seq))


def writer_only(path: str, max_bytes: int, backup_count: int, socket_dir: str, ready) -> None:
    """The process that becomes the writer and logs nothing: the one the kill test SIGKILLs."""
    log = own_logger(path, max_bytes, backup_count, socket_dir)
    assert log.handlers[0].server is not None
    ready.set()
    time.sleep(600)


def timed_worker(path: str, tag: str, count: int, max_bytes: int, backup_count: int,
                 socket_dir: str, report: str) -> None:
    """Logs `count` records and reports the longest single `emit` (the stall a writer's
    death costs) and when it finished."""
    log = own_logger(path, max_bytes, backup_count, socket_dir)
    handler = log.handlers[0]
    assert handler.server is None, "the writer process should own the file"
    longest = 0.0
    for seq in range(count):
        t0 = time.monotonic()
        log.info(message(tag, seq))
        longest = max(longest, time.monotonic() - t0)
    handler.flush()
    facts = {"longest_emit": longest, "finished": time.monotonic(), "resent": handler.connection.resent,
             "pid": os.getpid()}
    Path(report).write_text(json.dumps(facts))


def server_only(path: str, max_bytes: int, backup_count: int, socket_dir: str, addresses) -> None:
    """A writer started as the run layer starts one (`LogWriterServer.start`): its clients get
    only its address. Sends the address, then waits to be killed."""
    from trainvisor.logging import LogWriterServer

    server = LogWriterServer.start(path, maxBytes=max_bytes, backupCount=backup_count, socket_dir=socket_dir)
    addresses.put(server.address)
    time.sleep(600)
