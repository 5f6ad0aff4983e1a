"""The death watcher: the child's one signal when trainvisor dies without ending it (SIGKILL).

PR_SET_PDEATHSIG fires at each re-parenting, and a SIGKILLed trainvisor hands its children from
each dying thread to the next: the training got its SIGTERM three or four times, and a second
SIGTERM means "abort now" to many trainings, cutting the checkpoint save the first one started.
So, where `trainvisor._native._deathwatch` is built and the kernel has pidfd_open, a forked
watcher (`_native/_deathwatch.c`) waits on a pipe whose only write end trainvisor holds: when
trainvisor dies in any way its end closes, and the watcher sends the death signal once to the
child's process group (what trainvisor's own forwarding signals) unless the child ended first; it
exits when the child does. The child tells it its pid between fork and exec (`announce`), so a
trainvisor killed right after the fork is covered too; the child then has no parent-death signal.
The watcher is trainvisor's own child, not the training's: the tree and the reaper spare it.

A watcher that dies before trainvisor (killed by hand) is noticed by the supervision's wait loop
(`rearm`, at each tree refresh) and started again with the child's pid; a trainvisor SIGKILLed
in between sends nothing. Where the watcher cannot run, the child keeps PR_SET_PDEATHSIG
(signals.child_setup) as before, with its repeated signals.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Optional

__all__ = ["DeathWatch", "native_watcher"]

log = logging.getLogger("trainvisor.supervisor")


def native_watcher() -> Optional[object]:
    """The C module when it is built and the kernel has pidfd_open, else None (PR_SET_PDEATHSIG);
    None too with TRAINVISOR_PURE_PYTHON set, as for the other C speedups."""
    if os.environ.get("TRAINVISOR_PURE_PYTHON"):
        return None
    try:
        from .._native import _deathwatch
    except ImportError:
        return None
    return _deathwatch if _deathwatch.supported() else None


class DeathWatch:
    """One watcher process at a time for one child; `close` ends it without a signal."""

    def __init__(self, death_signal: int, native: object) -> None:
        self.death_signal = int(death_signal)
        self._native = native
        self.pid = 0
        self._write_fd = -1
        self._start()

    @classmethod
    def start(cls, death_signal: Optional[int]) -> Optional["DeathWatch"]:
        """A running watcher, or None: no death signal configured, or no watcher here."""
        if death_signal is None:
            return None
        native = native_watcher()
        if native is None:
            return None
        try:
            return cls(death_signal, native)
        except OSError as exc:  # no fork (out of processes): the child keeps PR_SET_PDEATHSIG
            log.warning("could not start the death watcher (%s): the child gets PR_SET_PDEATHSIG", exc)
            return None

    def _start(self) -> None:
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        try:
            self.pid = self._native.start(read_fd, self.death_signal)
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        self._write_fd = write_fd

    def announce(self) -> None:
        """In the child between fork and exec: its own pid to the watcher. The write end closes
        at exec (O_CLOEXEC), so from then on only trainvisor holds it."""
        self._native.announce(self._write_fd)

    def rearm(self, child_pid: int) -> None:
        """From the wait loop while the child (not yet reaped: its pid is still its own) runs: a
        watcher that ended (killed by hand) is replaced, and told the pid here; one that could
        not be started is tried again at the next call."""
        if self.pid > 0:
            if not self._ended():
                return
            self.pid = 0  # reaped
            self._close_pipe()
            if not _has_exited(child_pid):  # else it followed the child's end, as it should
                log.warning("the death watcher ended while the child runs: starting another")
        if self.pid > 0 or _has_exited(child_pid):
            return
        try:
            self._start()
        except OSError as exc:
            log.warning("could not start the death watcher again (%s): trying at the next look", exc)
            return
        try:
            os.write(self._write_fd, child_pid.to_bytes(4, sys.byteorder, signed=True))
        except OSError:
            pass  # killed again at once: the next call starts another

    def _ended(self) -> bool:
        try:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return True
        return done == self.pid

    def close(self) -> None:
        """The supervision is over (the child reaped, or never started): the watcher is killed
        before its pipe closes, so it cannot take that close for trainvisor's death, and reaped."""
        if self.pid > 0 and not self._ended():  # the pid is still our unreaped child's
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        self.pid = 0
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self._write_fd >= 0:
            os.close(self._write_fd)
            self._write_fd = -1


def _has_exited(pid: int) -> bool:
    """Whether our child `pid` has exited, without reaping it (Popen does that)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True
