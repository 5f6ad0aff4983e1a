"""Reaping orphans while the child runs.

As a subreaper or as PID 1, trainvisor inherits every orphan of the child's
tree; each one that exits stays a zombie (holding its process ID) until it is
waited for. A long training whose data loaders double-fork would run out of
process IDs, so orphans are reaped as soon as they exit.

The child itself is never reaped here: `subprocess.Popen` waits for it, and a
status taken from it would make Popen report exit code 0 (ECHILD). Nor are
processes the host program started and waits for itself: `keep` names them,
and any zombie child in trainvisor's own session is left to whoever forked it
(the child's tree runs in the child's session, or in one it made with setsid).
As PID 1, nobody else can wait for an orphan, so only `keep` is spared.
"""
from __future__ import annotations

import os
import select
from typing import Callable, Iterable, Iterator, NamedTuple, Optional

__all__ = ["Reaper", "Waker"]


class Reaper:
    """Reaps exited children of this process that nobody else waits for."""

    def __init__(self, *, keep: Callable[[], Iterable[int]], pid1: bool = False) -> None:
        self._keep = keep
        self._pid1 = pid1
        self._own_sid = os.getsid(0)
        # Children that existed before the supervision began belong to the host program.
        self._before = set(_child_pids())
        self.reaped = 0

    @property
    def before(self) -> frozenset[int]:
        """The children this process had before the supervision began: the host program's."""
        return frozenset(self._before)

    def reap(self) -> int:
        """Reap every exited orphan now; returns how many. Never blocks."""
        count = 0
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                break
            if info is None:
                break
            # waitid names one exited child; when it is one to spare, the others
            # behind it are found by their state in /proc.
            if not self._reap_one(info.si_pid):
                count += sum(self._reap_one(pid) for pid in _zombie_children())
                break
            count += 1
        self.reaped += count
        return count

    def _reap_one(self, pid: int) -> bool:
        if pid in self._before or pid in set(self._keep()):
            return False
        if not self._pid1:
            try:
                if os.getsid(pid) == self._own_sid:
                    return False
            except OSError:
                return False
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return done == pid


class _Stat(NamedTuple):
    pid: int
    state: str
    ppid: int


class Waker:
    """What the wait loop sleeps on: the child's pidfd (readable when it exits)
    and a pipe that the SIGCHLD handler writes to (an orphan exited)."""

    def __init__(self, child_pid: int) -> None:
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self._pidfd: int | None = os.pidfd_open(child_pid)
        except (OSError, AttributeError):  # Linux < 5.3: the caller polls
            self._pidfd = None

    @property
    def sees_child_exit(self) -> bool:
        return self._pidfd is not None

    def notify(self) -> None:
        """Safe from a signal handler: one non-blocking write."""
        try:
            os.write(self._w, b"x")
        except OSError:
            pass

    def wait(self, timeout: float) -> None:
        fds = [self._r] if self._pidfd is None else [self._r, self._pidfd]
        ready, _, _ = select.select(fds, [], [], max(0.0, timeout))
        if self._r in ready:
            try:
                os.read(self._r, 4096)
            except OSError:
                pass

    def close(self) -> None:
        for fd in (self._r, self._w, self._pidfd):
            if fd is not None:
                os.close(fd)


def _proc_stats(pids: Optional[Iterable[int]] = None) -> Iterator[_Stat]:
    """The state and parent of each of `pids` (default: every process), from /proc/PID/stat."""
    if pids is None:
        pids = (int(name) for name in os.listdir("/proc") if name.isdigit())
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        yield _Stat(pid, fields[0].decode(), int(fields[1]))


def _listed_children() -> Optional[list[int]]:
    """This process's children as the kernel lists them per thread (an orphan given to a subreaper
    is listed under one of its threads), or None where the kernel keeps no such list. Reading a
    few small files instead of every process's stat keeps a run's start independent of how many
    processes the machine has."""
    if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):
        return None
    pids: list[int] = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                pids.extend(map(int, f.read().split()))
        except OSError:
            continue  # the thread ended while we read
    return pids


def _child_pids() -> list[int]:
    listed = _listed_children()
    if listed is not None:
        return listed
    me = os.getpid()
    return [s.pid for s in _proc_stats() if s.ppid == me]


def _zombie_children() -> list[int]:
    me = os.getpid()
    return [s.pid for s in _proc_stats(_listed_children()) if s.ppid == me and s.state == "Z"]
