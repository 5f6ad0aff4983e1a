"""Code that runs in the child processes of the trainvisor.logging tests (importable by
spawn and forkserver children, and runnable as a script for the subprocess scenarios)."""
from __future__ import annotations

import ctypes
import json
import logging
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path

from trainvisor.logging import MultiProcessingLogHandler, attach

LOGGER = "tvtest"


def test_logger(handler: logging.Handler | None = None) -> logging.Logger:
    """The logger the tests log through: not root, so pytest's capture handlers stay out."""
    log = logging.getLogger(LOGGER)
    log.setLevel(logging.INFO)
    log.propagate = False
    if handler is not None and handler not in log.handlers:
        log.addHandler(handler)
    return log


def message(tag: str, seq: int) -> str:
    """A record whose wholeness the parser can check: every 7th spans several lines."""
    extra = 3 if seq % 7 == 0 else 0
    pad = "x" * (seq % 53)
    lines = [f"R {tag} {seq} {extra} {pad}"]
    lines += [f"  {tag}/{seq} continuation {j}" for j in range(extra)]
    return "\n".join(lines)


def log_records(tag: str, count: int, handler: logging.Handler | None = None) -> str:
    log = test_logger(handler)
    for seq in range(count):
        log.info(message(tag, seq))
    return tag


def attach_test_logger(address: str | None = None) -> None:
    """Pool/executor initializer: the worker is told nothing but the environment (or address)."""
    attach(address, logger=test_logger(), fmt="%(message)s", capture_uncaught=False)


def log_task(args: tuple[str, int]) -> str:
    return log_records(*args)


def log_then_exit(tag: str, count: int, how: str, handler: logging.Handler | None = None) -> None:
    """Log, log a traceback, then leave by `how` immediately."""
    log = log_records(tag, count, handler) and test_logger()
    try:
        raise ValueError(f"payload {tag}")
    except ValueError:
        log.exception("E %s failed", tag)
    if how == "sys.exit":
        sys.exit(3)
    if how == "os._exit":
        os._exit(4)
    raise RuntimeError(f"uncaught {tag}")


# -- the writer-killed scenario, run as `python logging_workers.py family LOG OUT N` -----------


def _log_until_flag(index: int, flag: str, err_dir: str, address: str) -> None:
    err = os.open(os.path.join(err_dir, f"child{index}.err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(err, 2)
    log = test_logger()
    # a client of the address that declines to take over: it falls back to stderr
    log.handlers[:] = [MultiProcessingLogHandler.connect(address, formatter=logging.Formatter("%(message)s"),
                                                         take_over=False)]
    seq = after = 0
    while after < 500:
        log.info(message(f"c{index}", seq))
        seq += 1
        if os.path.exists(flag):
            after += 1
        elif seq % 50 == 0:
            time.sleep(0.001)


def _owner(path: str, n: int, flag: str, err_dir: str, ready: "multiprocessing.synchronize.Event") -> None:
    handler = MultiProcessingLogHandler(path, socket_dir=err_dir)  # killed: cannot clean up
    handler.setFormatter(logging.Formatter("%(message)s"))
    test_logger(handler)
    ctx = multiprocessing.get_context("fork")
    for i in range(n):
        ctx.Process(target=_log_until_flag, args=(i, flag, err_dir, handler.address), daemon=False).start()
    ready.set()
    time.sleep(600)


def family(path: str, out: str, n: int) -> None:
    """Start an owner (writer) with `n` forked loggers, SIGKILL the owner while they log,
    and report how long the orphaned loggers took to finish (we reap them as subreaper)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to us, not to init
    work = os.path.dirname(out)
    flag = os.path.join(work, "writer-killed")
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    owner = ctx.Process(target=_owner, args=(path, n, flag, work, ready))
    owner.start()
    ready.wait(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not os.path.exists(path) or os.path.getsize(path) < 200_000):
        time.sleep(0.01)
    os.kill(owner.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    _, status = os.waitpid(owner.pid, 0)  # its sockets are closed once it is reaped
    codes: dict[int, int] = {owner.pid: os.waitstatus_to_exitcode(status)}
    Path(flag).touch()
    while time.monotonic() - killed_at < 30:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.01)
            continue
        codes[pid] = os.waitstatus_to_exitcode(status)
    report = {"owner_pid": owner.pid, "exit_codes": codes, "seconds": time.monotonic() - killed_at}
    Path(out).write_text(json.dumps(report))


def _late(delay: float) -> None:
    time.sleep(delay)
    test_logger().info(message("late", 0))


def outlived(path: str) -> None:
    """The owner's code ends while a non-daemon child still has something to log."""
    handler = MultiProcessingLogHandler(path)
    handler.setFormatter(logging.Formatter("%(message)s"))
    test_logger(handler)
    multiprocessing.get_context("fork").Process(target=_late, args=(0.3,)).start()
    test_logger().info(message("owner", 0))


if __name__ == "__main__":
    if sys.argv[1] == "family":
        family(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "attached":  # an unrelated program under `trainvisor run`
        log = logging.getLogger("program")
        handler = attach()
        assert handler is not None, "TRAINVISOR_LOG_ADDRESS not set"
        for seq in range(int(sys.argv[2])):
            log.info(message("attached", seq))
        if sys.argv[3:] == ["raise"]:
            raise RuntimeError("uncaught in attached program")


def reopen_same_file(path: str) -> None:
    """What a spawn child does when the main module sets logging up at import time."""
    handler = MultiProcessingLogHandler(path)
    handler.setFormatter(logging.Formatter("%(message)s"))
    test_logger(handler).info(message("reopened", 0))
    sys.exit(0 if handler.server is None else 5)
