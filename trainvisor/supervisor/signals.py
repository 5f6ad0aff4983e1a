"""What trainvisor does with every signal, and what the child starts with.

=========  ==========================================================================
Signal     What trainvisor does
=========  ==========================================================================
SIGINT     Forwarded to the child's process group; starts the kill timeout.
SIGTERM    Forwarded to the child's process group; starts the kill timeout.
SIGHUP     Forwarded to the child's process group; starts the kill timeout.
SIGQUIT    Forwarded only: a JVM child answers it with a thread dump and goes on,
           a Python child dumps core; either way trainvisor exits when it does.
SIGUSR1/2  Forwarded (checkpoint-now and similar conventions of training scripts).
SIGWINCH   Forwarded (a child that draws progress bars may ask the tty for its size).
SIGCHLD    While reaping (subreaper or PID 1): wakes the wait loop, which reaps
           every exited orphan at once and checks on the child.
SIGKILL    Cannot be caught: the child gets its parent-death signal
           (`on_supervisor_death`, SIGTERM by default).
SIGSTOP    Cannot be caught; the child, in its own session, is not stopped.
SIGTSTP,   Default (stop trainvisor): the child is in its own session, so Ctrl-Z
SIGTTIN,   does not stop the training; trainvisor resumes on SIGCONT.
SIGTTOU
SIGPIPE    Ignored by Python: a closed stdout makes the pass-through stop with a
           warning while the child's output is still read and parsed.
others     Default disposition (SIGALRM, SIGPROF, SIGXCPU... end trainvisor; the
           child then gets its parent-death signal).
=========  ==========================================================================

The child starts with SIGINT, SIGQUIT and SIGTERM at their default disposition
even when trainvisor was started with them ignored (a background job of a
script gets SIGINT and SIGQUIT ignored): handled signals are reset on exec, but
ignored ones stay ignored, and the child would never see a forwarded Ctrl-C.
"""
from __future__ import annotations

import ctypes
import os
import signal
import threading
from types import FrameType
from typing import Callable, Optional

__all__ = [
    "FORWARDED_SIGNALS",
    "SHUTDOWN_SIGNALS",
    "DEFAULT_IN_CHILD",
    "ON_SUPERVISOR_DEATH",
    "death_signal_for",
    "child_setup",
    "SignalHandlers",
]

FORWARDED_SIGNALS = (
    signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
    signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH,
)
# Signals after which trainvisor itself is shutting down: the kill timeout starts.
SHUTDOWN_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
DEFAULT_IN_CHILD = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
# What the child is sent when trainvisor dies without a chance to end it (SIGKILL).
ON_SUPERVISOR_DEATH = {"term": signal.SIGTERM, "keep": None}

_PR_SET_PDEATHSIG = 1


def death_signal_for(choice: str) -> Optional[int]:
    """The parent-death signal for an `on_supervisor_death` value; ConfigError if unknown."""
    try:
        return ON_SUPERVISOR_DEATH[choice]
    except (KeyError, TypeError):
        from ..errors import ConfigError

        raise ConfigError(f"on_supervisor_death must be one of {', '.join(ON_SUPERVISOR_DEATH)}, "
                          f"not {choice!r}") from None


def _libc() -> Optional[ctypes.CDLL]:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def child_setup(death_signal: Optional[int]) -> Callable[[], None]:
    """The function the child runs between fork and exec.

    PR_SET_PDEATHSIG fires when the *thread* that forked exits, so the caller must
    fork from a thread that lives as long as the supervision (`Supervisor.run`
    blocks its thread until the child is reaped). If trainvisor died between the
    fork and the prctl, no signal would ever come: getppid() tells.
    """
    parent = os.getpid()
    libc = _libc()

    def setup() -> None:
        for sig in DEFAULT_IN_CHILD:
            try:
                signal.signal(sig, signal.SIG_DFL)
            except ValueError:  # not Python's main thread in this fork: ask libc
                if libc is not None:
                    libc.signal(int(sig), 0)  # 0 is SIG_DFL
        if death_signal is None or libc is None:
            return
        libc.prctl(_PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), death_signal)

    return setup


class SignalHandlers:
    """Installs trainvisor's handlers for the supervision and restores the previous ones.

    Python runs handlers only in the main thread: elsewhere nothing is installed
    (the caller then forwards signals with `Supervisor.send_signal`).
    """

    def __init__(self, *, forward: Optional[Callable[[int], None]],
                 on_child: Optional[Callable[[], None]]) -> None:
        self._forward = forward
        self._on_child = on_child
        self._previous: dict[int, object] = {}

    def install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        forward, on_child = self._forward, self._on_child
        if forward is not None:
            def forwarding(signum: int, frame: Optional[FrameType]) -> None:
                forward(signum)

            for sig in FORWARDED_SIGNALS:
                self._set(sig, forwarding)
        if on_child is not None:
            self._set(signal.SIGCHLD, lambda signum, frame: on_child())
        return True

    def _set(self, sig: int, handler: Callable[[int, Optional[FrameType]], None]) -> None:
        try:
            self._previous[sig] = signal.signal(sig, handler)
        except (OSError, ValueError):
            pass

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            try:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            except (OSError, ValueError, TypeError):
                pass
        self._previous.clear()
