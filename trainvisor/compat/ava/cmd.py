"""`cmd.startproc(args)`, `cmd.logproc(proc, hooks)`, `cmd.runproc(args, hooks)`: the AVA SDK's
way to run a training and read its log line by line.

The child's stdout and stderr (merged, as AVA did) pass through unchanged to this process's
stdout, or, when the run log is set up (`initialize_logger`, as `TrainInstance` does), to the
log line by line, as AVA's `logger.info` of each line (which, with no log set up, went nowhere).
Each hook is called with each line as `str`, its newline kept (AVA's were Python 2 byte
strings), decoded as UTF-8 with bad bytes replaced. A hook
that raises is logged and counted, never stops the loop or the training. At the end of the
output, every hook with a `finish()` is told (the epoch-end callback submits the last snapshot).
"""
from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any, Callable, Sequence, Union

from ...stream.faults import FaultCounter

__all__ = ["startproc", "logproc", "runproc"]

log = logging.getLogger("trainvisor.compat.ava.cmd")

Hook = Callable[[str], Any]
Hooks = Union[None, Hook, Sequence[Hook]]


def startproc(args: Union[str, Sequence[str]], **popen: Any) -> subprocess.Popen:
    """Start `args` (a string runs through the shell, as in AVA; a list does not) with its
    stdout and stderr merged into one pipe for `logproc`. `popen`: more `Popen` arguments (cwd, env)."""
    return subprocess.Popen(args, shell=isinstance(args, str), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, **popen)


def logproc(proc: subprocess.Popen, log_hook: Hooks = None) -> None:
    """Read `proc`'s output to its end: each line passed on and given to every hook."""
    hooks = _hooks(log_hook)
    faults = FaultCounter(log)
    out = _sink()
    with proc.stdout:
        for raw in iter(proc.stdout.readline, b""):
            out(raw)
            line = raw.decode("utf-8", "replace")
            for hook in hooks:
                try:
                    hook(line)
                except Exception as exc:
                    faults.record(f"hook {_name(hook)}", exc)
    for hook in hooks:
        finish = getattr(hook, "finish", None)
        if callable(finish):
            try:
                finish()
            except Exception as exc:
                faults.record(f"hook {_name(hook)}", exc)


def runproc(args: Union[str, Sequence[str]], log_hook: Hooks = None, **popen: Any) -> int:
    """`startproc`, `logproc`, then the exit status (negative: killed by that signal)."""
    proc = startproc(args, **popen)
    logproc(proc, log_hook)
    return proc.wait()


def _hooks(log_hook: Hooks) -> list:
    if log_hook is None:
        return []
    if callable(log_hook):
        return [log_hook]
    hooks = [h for h in log_hook if h is not None]  # AVA's getters return None for what they lack
    for h in hooks:
        if not callable(h):
            raise TypeError(f"log_hook must be callables, got {h!r}")
    return hooks


def _name(hook: object) -> str:
    return str(getattr(hook, "name", None) or getattr(hook, "__name__", None) or type(hook).__name__)


def _sink() -> Callable[[bytes], None]:
    """Where the lines go: the run log when `initialize_logger` set it up (AVA logged every
    line), else this process's stdout, byte for byte."""
    from ...logging.handler import MultiProcessingLogHandler

    if any(isinstance(h, MultiProcessingLogHandler) for h in logging.getLogger().handlers):
        child = logging.getLogger("trainvisor.compat.ava.proc")
        return lambda raw: child.info("%s", raw.decode("utf-8", "replace").rstrip("\r\n"))
    stdout = getattr(sys.stdout, "buffer", None)

    def write(raw: bytes) -> None:
        if stdout is not None:
            stdout.write(raw)
            stdout.flush()
        else:
            sys.stdout.write(raw.decode("utf-8", "replace"))

    return write


