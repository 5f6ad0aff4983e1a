"""The fault signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) and SIGPIPE relayed
without a handler.

A platform or a user may send these from outside, and an init forwards them to the training
like any other signal. But the kernel also raises them in the thread that faulted, and a
Python handler there would return to the faulting instruction forever (the C-level handler
only sets a flag): a crash in trainvisor would become a hang at full CPU. So these are not
handled: they are blocked in the main thread before the run starts any thread (every thread
inherits the mask) and taken with `sigtimedwait` on a thread of their own. A real fault in a
blocked thread still kills trainvisor with its default action (the kernel unblocks a fault
it raises), and one sent from outside is waited for, then forwarded to the child's process
group while a child is supervised, else re-raised with its default action, as before.

SIGPIPE the same way, for the opposite reason: trainvisor writes the training's output, and a
write to a closed stdout raises SIGPIPE in the writing thread. With the set blocked, that one
stays pending on the thread that wrote (the write fails with EPIPE, as under Python's SIG_IGN),
while one sent from outside is process-wide, taken here and forwarded like any other signal.
"""
from __future__ import annotations

import signal
import threading
from typing import Callable, Optional

__all__ = ["SYNCHRONOUS_SIGNALS", "RELAYED_SIGNALS", "SignalRelay", "acquire", "release", "current", "unblock_in_child"]

SYNCHRONOUS_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL,
                                 signal.SIGTRAP, signal.SIGSYS})
RELAYED_SIGNALS = SYNCHRONOUS_SIGNALS | {signal.SIGPIPE}
# How often the waiting thread looks up from its wait (it is woken to stop: this is a fallback).
_WAIT = 1.0


class SignalRelay:
    """The waiting thread and where what it takes goes (`target`, set while a child is supervised)."""

    def __init__(self) -> None:
        self.target: Optional[Callable[[int], None]] = None
        self._stopping = threading.Event()
        self._unblock: frozenset = frozenset()
        self._thread = threading.Thread(target=self._loop, name="trainvisor-signals", daemon=True)

    def start(self) -> "SignalRelay":
        before = signal.pthread_sigmask(signal.SIG_BLOCK, RELAYED_SIGNALS)
        self._unblock = RELAYED_SIGNALS - set(before)  # what to give back at the end
        self._thread.start()  # after the block: its own mask has them blocked, as sigtimedwait needs
        return self

    def stop(self) -> None:
        """End the thread (woken by a signal of the set sent to it alone) and unblock the set in
        this thread (the main one); threads started meanwhile keep theirs blocked, harmlessly."""
        self._stopping.set()
        try:
            signal.pthread_kill(self._thread.ident, signal.SIGSYS)
        except (ProcessLookupError, TypeError):
            pass
        self._thread.join()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, self._unblock)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            info = signal.sigtimedwait(RELAYED_SIGNALS, _WAIT)
            if info is None or self._stopping.is_set():
                continue
            target = self.target
            if target is not None:
                target(info.si_signo)
                continue
            # No child to give it to: what would have happened without the relay (its disposition,
            # the default unless someone set one, SIG_IGN for SIGPIPE: only the main thread may change it).
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {info.si_signo})
            signal.pthread_kill(threading.get_ident(), info.si_signo)


_relay: Optional[SignalRelay] = None
_users = 0
_relay_lock = threading.Lock()


def acquire() -> Optional[SignalRelay]:
    """The process's relay, started by the first user in the main thread (None elsewhere: a
    library caller's other thread cannot choose the main thread's mask). A `Run` acquires it
    in `start()`, before any thread of its own starts, so every one has the set blocked, and
    releases it in `close()`; the last release stops it."""
    global _relay, _users
    with _relay_lock:
        if threading.current_thread() is not threading.main_thread():
            return None
        if _relay is None:
            _relay = SignalRelay().start()
        _users += 1
        return _relay


def release() -> None:
    global _relay, _users
    with _relay_lock:
        if threading.current_thread() is not threading.main_thread() or _relay is None:
            return
        _users -= 1
        if _users == 0:
            _relay, relay_ = None, _relay
            relay_.stop()


def current() -> Optional[SignalRelay]:
    """The running relay, if a user started one (a supervision sets its target)."""
    return _relay


def unblock_in_child() -> None:
    """Between fork and exec: the child starts with an empty mask for these (a mask is inherited
    through exec, and a training with SIGSEGV blocked would hang on its first fault)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, RELAYED_SIGNALS)
