"""What trainvisor does with every signal, and what the child starts with.

The rule is an init's (dumb-init's): every signal a platform or a user may send goes to the
child's process group, so trainvisor can stand between a container runtime and the training
without changing what the training sees. Only SIGCHLD is trainvisor's own.

=========  ==========================================================================
Signal     What trainvisor does
=========  ==========================================================================
SIGTERM    Forwarded as `process.term_signal` (SIGTERM; SIGINT for Caffe, which
           snapshots on it); starts the kill timeout and the `--grace` budget of the
           shutdown (run/shutdown.py). A second SIGTERM or SIGINT skips to the end.
SIGINT,    Forwarded; start the kill timeout and the grace budget.
SIGHUP
SIGQUIT    Forwarded only: a JVM child answers it with a thread dump and goes on,
           a Python child dumps core; either way trainvisor exits when it does.
SIGUSR1/2  Forwarded (checkpoint-now and similar conventions of training scripts).
SIGWINCH   Forwarded (with --pty the child's terminal takes trainvisor's size first).
SIGCONT    Forwarded: whoever continued trainvisor continues the training too.
SIGTSTP,   Job control: the child's group is sent SIGSTOP in their place (its group
SIGTTIN,   is orphaned in its own session, where the kernel discards these three),
SIGTTOU    then trainvisor stops itself; SIGCONT continues both.
SIGSEGV,   Forwarded when sent from outside, without a handler (syncsignals.py): a
SIGBUS,    real fault in trainvisor still kills it with its default action.
SIGFPE,
SIGILL,
SIGTRAP,
SIGSYS
SIGPIPE    Forwarded when sent from outside (syncsignals.py); one that trainvisor's
           own write to a closed stdout raises stays with that write: the pass-through
           stops with a warning while the child's output is still read and parsed.
others     Forwarded: SIGALRM, SIGABRT, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO,
           SIGPWR, SIGSTKFLT, SIGURG.
SIGCHLD    Own: while reaping (subreaper or PID 1) wakes the wait loop, which reaps
           every exited orphan at once and checks on the child.
SIGKILL    Cannot be caught: the child's process group gets the death signal
           (`on_supervisor_death`, SIGTERM by default) once, from the death watcher
           (deathwatch.py); without it, the child's PR_SET_PDEATHSIG (maybe repeated).
SIGSTOP    Cannot be caught; the child, in its own session, is not stopped.
realtime   Not handled (glibc reserves the first ones; no platform sends them).
=========  ==========================================================================

Outside a supervision (before the child starts, while uploads drain) trainvisor's
dispositions are Python's: SIGTERM and SIGINT are then the Run's (run/shutdown.py).

The child starts with SIGINT, SIGQUIT and SIGTERM at their default disposition
even when trainvisor was started with them ignored (a background job of a
script gets SIGINT and SIGQUIT ignored): handled signals are reset on exec, but
ignored ones stay ignored, and the child would never see a forwarded Ctrl-C.
Its signal mask starts empty of the fault signals trainvisor blocks.
"""
from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING, Callable, Optional

from .syncsignals import RELAYED_SIGNALS, current, unblock_in_child
from .kernel import Kernel

if TYPE_CHECKING:
    from .deathwatch import DeathWatch

__all__ = [
    "FORWARDED_SIGNALS",
    "JOB_CONTROL_SIGNALS",
    "OWN_SIGNALS",
    "SHUTDOWN_SIGNALS",
    "DEFAULT_IN_CHILD",
    "ON_SUPERVISOR_DEATH",
    "death_signal_for",
    "child_setup",
    "SignalHandlers",
]

# Job control: forwarded, the child's group stopped, then trainvisor itself.
JOB_CONTROL_SIGNALS = frozenset({signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU})
# trainvisor's own (see the table), and the two that cannot be caught.
OWN_SIGNALS = frozenset({signal.SIGCHLD})
_UNCATCHABLE = frozenset({signal.SIGKILL, signal.SIGSTOP})
FORWARDED_SIGNALS = tuple(
    s for s in signal.Signals
    if s < 32 and s not in OWN_SIGNALS | _UNCATCHABLE | JOB_CONTROL_SIGNALS | RELAYED_SIGNALS
)
# Signals after which trainvisor itself is shutting down: the kill timeout starts.
SHUTDOWN_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
DEFAULT_IN_CHILD = (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM)
# What the child is sent when trainvisor dies without a chance to end it (SIGKILL).
ON_SUPERVISOR_DEATH = {"term": signal.SIGTERM, "keep": None}



def death_signal_for(choice: str) -> Optional[int]:
    """The parent-death signal for an `on_supervisor_death` value; ConfigError if unknown."""
    try:
        return ON_SUPERVISOR_DEATH[choice]
    except (KeyError, TypeError):
        from ..errors import ConfigError

        raise ConfigError(f"on_supervisor_death must be one of {', '.join(ON_SUPERVISOR_DEATH)}, "
                          f"not {choice!r}") from None


def child_setup(death_signal: Optional[int], watch: Optional["DeathWatch"] = None) -> Callable[[], None]:
    """The function the child runs between fork and exec.

    With a death `watch` (deathwatch.py) the child tells the watcher its pid and sets no
    parent-death signal: both would make two signals again. Without one, PR_SET_PDEATHSIG:
    it fires when the *thread* that forked exits, and again at each re-parenting from a dying
    thread to the next (a SIGKILLed trainvisor sends it several times), so the caller must
    fork from a thread that lives as long as the supervision (`Supervisor.run`
    blocks its thread until the child is reaped). If trainvisor died between the
    fork and the prctl, no signal would ever come: getppid() tells.
    """
    parent = os.getpid()
    kernel = Kernel()

    def setup() -> None:
        unblock_in_child()
        for sig in DEFAULT_IN_CHILD:
            try:
                signal.signal(sig, signal.SIG_DFL)
            except ValueError:  # not Python's main thread in this fork: ask the kernel
                kernel.default_signal(int(sig))
        if watch is not None:
            watch.announce()
            return
        if death_signal is None or not kernel.usable:
            return
        kernel.set_parent_death_signal(int(death_signal))
        if os.getppid() != parent:
            os.kill(os.getpid(), death_signal)

    return setup


class SignalHandlers:
    """Installs trainvisor's handlers for the supervision and restores the previous ones.

    Python runs handlers only in the main thread: elsewhere nothing is installed
    (the caller then forwards signals with `Supervisor.send_signal`). `suspend` is
    called for job control (TSTP, TTIN, TTOU) before trainvisor stops itself.
    """

    def __init__(self, *, forward: Optional[Callable[[int], None]],
                 on_child: Optional[Callable[[], None]],
                 suspend: Optional[Callable[[int], None]] = None) -> None:
        self._forward = forward
        self._on_child = on_child
        self._suspend = suspend
        self._previous: dict[int, object] = {}
        self._relay = None

    def install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        forward, on_child, suspend = self._forward, self._on_child, self._suspend
        if forward is not None:
            def forwarding(signum: int, frame: Optional[FrameType]) -> None:
                forward(signum)

            for sig in FORWARDED_SIGNALS:
                self._set(sig, forwarding)
            self._relay = current()
            if self._relay is not None:
                self._relay.target = forward  # the fault signals and SIGPIPE sent from outside
        if suspend is not None:
            def stopping(signum: int, frame: Optional[FrameType]) -> None:
                suspend(signum)
                os.kill(os.getpid(), signal.SIGSTOP)  # resumed by SIGCONT, which is then forwarded

            for sig in JOB_CONTROL_SIGNALS:
                self._set(sig, stopping)
        if on_child is not None:
            self._set(signal.SIGCHLD, lambda signum, frame: on_child())
        return True

    def _set(self, sig: int, handler: Callable[[int, Optional[FrameType]], None]) -> None:
        try:
            self._previous[sig] = signal.signal(sig, handler)
        except (OSError, ValueError):
            pass

    def restore(self) -> None:
        if self._relay is not None:
            self._relay.target = None
            self._relay = None
        for sig, handler in self._previous.items():
            try:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            except (OSError, ValueError, TypeError):
                pass
        self._previous.clear()
