"""What /proc says about a process, read without psutil (a few hundred microseconds of file reads
instead of importing it: the common end of a run, and every stamp a run records).

A process is named by its `Stamp`: its pid and its start time in clock ticks since boot
(/proc/PID/stat field 22). A pid is reused once its process is gone; the pair never is within a
boot, so a stamp recorded by one trainvisor names the same process for another, or none."""
from __future__ import annotations

import os
import time
from typing import Callable, Iterable, NamedTuple, Optional

__all__ = ["Stamp", "stamp_of", "pid_space", "ticks_now", "TICKS", "wait_stopped", "nothing_left", "parent_of", "alive",
           "children_of", "descendants_of"]

# The kernel's clock tick (USER_HZ): the unit of a stat's start time.
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Stamp(NamedTuple):
    """One process as the kernel names it: pid, start time (ticks since boot), group, session."""

    pid: int
    start: int
    pgid: int
    sid: int


def stamp_of(pid: int, *, exited: bool = False) -> Optional[Stamp]:
    """The stamp of a running `pid`; None when it is gone or a zombie (it runs nothing any more),
    unless `exited`: a zombie's too (a child that ended before anyone looked, not yet waited for)."""
    fields = _stat_fields(pid)
    if fields is None or (fields[0] in ("Z", "X") and not exited):
        return None
    try:
        return Stamp(pid, int(fields[19]), int(fields[2]), int(fields[3]))
    except (IndexError, ValueError):
        return None


def _stat_fields(pid: int) -> Optional[list[str]]:
    """/proc/PID/stat from field 3 (the state) on: the name before it may hold spaces and ')'."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2:].decode("ascii", "replace").split()


def parent_of(pid: int) -> Optional[int]:
    fields = _stat_fields(pid)
    try:
        return int(fields[1]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def pid_space() -> str:
    """Which pids and start times these are: this boot's id and this PID namespace's. A record
    made in another boot, or in another container's namespace, names none of the processes here."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


def ticks_now() -> int:
    """Now, in the unit and from the origin of a stat's start time (the boot clock, in ticks)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * TICKS)


def wait_stopped(pid: int, *, timeout: float) -> bool:
    """Until `pid` is stopped (state T in /proc), at most `timeout` seconds: a stop signal acts
    when the process is next scheduled, not when it is sent. False if it did not stop (or ended)."""
    return _poll_proc(pid, "stat", lambda text: text.rsplit(") ", 1)[1][:1] in ("T", "t"), timeout)


def _poll_proc(pid: int, name: str, done: Callable[[str], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(f"/proc/{pid}/{name}") as fh:
                if done(fh.read()):
                    return True
        except (OSError, IndexError, ValueError):
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)


def nothing_left(child_pid: int, marker: Optional[bytes], spared: Iterable[int] = ()) -> bool:
    """True when /proc shows no process of the tree: the child is gone (or a zombie), we have no
    other child process (but `spared`: our own, such as the death watcher), and no process carries
    the run's token. Conservative: anything it cannot read counts as something left, and the full
    psutil walk decides."""
    me = os.getpid()
    if alive(child_pid) or children_of(me) - {child_pid, *spared}:
        return False
    if marker is None:
        return True
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return False
    for pid in pids:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    return False
        except OSError:
            continue  # gone, or not ours to read (psutil could not read it either)
    return True


def alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[:1] not in (["Z"], ["X"], [])


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.update(int(c) for c in f.read().split())
    except OSError:
        return {-1}  # unreadable: assume something is there
    return found


def descendants_of(pid: int) -> list[int]:
    """`pid`'s children, theirs, and so on, from the kernel's lists (no walk of every process)."""
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < 100_000:
        kids = children_of(todo.pop()) - {-1}
        found.extend(kids)
        todo.extend(kids)
    return found
