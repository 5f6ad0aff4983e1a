"""What a killed attempt left running, found from the run's process record and ended before the
next child starts (`end_leftovers`), never a stranger.

Found two ways, both by what the kernel says, never by an environment variable:
- a recorded process (pid and start time) that still runs with that start time;
- a process in the group or session of a recorded leader (the child, a worker that called
  setsid), which the record cannot list when it started after trainvisor's last look (or after
  trainvisor died). Such an id cannot be a stranger's while its leader runs with its recorded start
  time, nor while any process of the old group lives (the kernel does not hand out a pid still in
  use as a group or session id); so when the leader is gone and no process holds its pid, a member
  counts only when it started between the attempt's child and the attempt's end (its last sign of
  life, plus `SLACK`); a pid held by another process means the id was reused: none of them counts.
"""
from __future__ import annotations

import logging
import os
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from .procfs import TICKS, Stamp, pid_space, parent_of, stamp_of
from .record import RecordedAttempt, read_record

__all__ = ["Leftover", "find_leftovers", "end_leftovers", "LEFTOVER_GRACE"]

log = logging.getLogger("trainvisor.supervisor")

# SIGTERM, then this long before SIGKILL: the processes of a dead run, not a training to save.
LEFTOVER_GRACE = 2.0
# How late after an attempt's last sign of life a process of its group may have started (its
# workers forked as trainvisor died; the record's touch is twice a second).
SLACK = 5 * TICKS


@dataclass(frozen=True)
class Leftover:
    """A process an earlier attempt left running, and how it was known to be that attempt's."""

    stamp: Stamp
    attempt: int
    name: str
    found: str  # "recorded", "in its group or session"


def find_leftovers(attempts: Iterable[RecordedAttempt]) -> list[Leftover]:
    """The processes of `attempts` that still run (those recorded in this boot and PID namespace), each once."""
    table = _running()
    spare = {os.getpid(), *_ancestors()}
    found: dict[int, Leftover] = {}
    space = pid_space()
    for att in attempts:
        if att.space != space:
            continue  # another boot or container: every pid and start time is another process's
        recorded = {s.pid: s for s in (att.child, *att.seen)}
        for s in recorded.values():
            live = table.get(s.pid)
            if live is not None and live.start == s.start and s.pid not in spare:
                found.setdefault(s.pid, _leftover(live, att, "recorded"))
        leaders = {s.pid: s for s in recorded.values() if s.pid in (s.sid, s.pgid)}
        for leader in leaders.values():
            for live in _members(leader, att, table):
                if live.pid not in spare:
                    found.setdefault(live.pid, _leftover(live, att, "in its group or session"))
    return list(found.values())


def _members(leader: Stamp, att: RecordedAttempt, table: dict[int, Stamp]) -> list[Stamp]:
    """The running processes of `leader`'s group and session that are the attempt's."""
    holder = table.get(leader.pid)
    if holder is not None and holder.start != leader.start:
        return []  # the id is another process's pid now: reused, a stranger's group
    bounded = holder is None  # the leader is gone: the start times tell
    return [s for s in table.values()
            if leader.pid in (s.pgid, s.sid)
            and (not bounded or att.child.start <= s.start <= att.last + SLACK)]


def end_leftovers(path: Path, *, grace: float = LEFTOVER_GRACE) -> list[Leftover]:
    """End what the attempts recorded in `path` left running: SIGTERM, SIGKILL after `grace`; one
    line each to trainvisor's log (and stderr), then the record starts afresh. Returns them."""
    try:
        attempts = read_record(path)
        if not attempts:
            return []  # a new run directory, or a record already cleared: nothing to look for
        leftovers = find_leftovers(attempts)
        if leftovers:
            log.warning("run directory %s: %d process(es) of an earlier attempt still running (trainvisor was "
                        "killed?): ending them before the training starts", path.parent, len(leftovers))
            for left, how in _end(leftovers, grace):
                log.warning("ended pid %d (%s) of attempt %d, %s: %s", left.stamp.pid, left.name, left.attempt,
                            left.found, how)
        if not leftovers or not find_leftovers(attempts):
            os.truncate(path, 0)  # every process it names is gone: the next attempt's record alone
        return leftovers
    except OSError as exc:  # no /proc, an unreadable record: the training still starts, and says why
        log.warning("could not look for processes an earlier attempt left running (%s): %s", path,
                    exc.strerror or exc)
        return []


def _end(leftovers: list[Leftover], grace: float) -> list[tuple[Leftover, str]]:
    handles = [(left, _Handle.open(left.stamp)) for left in leftovers]
    live = [(left, h) for left, h in handles if h is not None]
    outcome = {left.stamp.pid: "already gone" for left, h in handles if h is None}
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 1.0)):
        for _, h in live:
            h.send(sig)
        live = _wait_gone(live, wait)
        running = {left.stamp.pid for left, _ in live}
        for left, _ in handles:
            if left.stamp.pid not in outcome and left.stamp.pid not in running:
                outcome[left.stamp.pid] = f"ended by {sig.name}"
    for left, h in handles:
        outcome.setdefault(left.stamp.pid, "still running after SIGKILL")
        if h is not None:
            h.close()
    return [(left, outcome[left.stamp.pid]) for left in leftovers]


class _Handle:
    """One process to end, held by a pidfd where the kernel has them: a signal then reaches that
    process even if it exits and its pid is reused meanwhile."""

    def __init__(self, stamp: Stamp, fd: Optional[int]) -> None:
        self.stamp, self.fd = stamp, fd

    @classmethod
    def open(cls, stamp: Stamp) -> "Optional[_Handle]":
        try:
            fd: Optional[int] = os.pidfd_open(stamp.pid)
        except (OSError, AttributeError):
            fd = None
        now = stamp_of(stamp.pid)
        if now is None or now.start != stamp.start:  # checked after the pidfd: it names this one
            if fd is not None:
                os.close(fd)
            return None
        return cls(stamp, fd)

    def send(self, sig: int) -> None:
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            elif (now := stamp_of(self.stamp.pid)) is not None and now.start == self.stamp.start:
                os.kill(self.stamp.pid, sig)
        except OSError:
            pass  # gone

    def gone(self) -> bool:
        now = stamp_of(self.stamp.pid)
        return now is None or now.start != self.stamp.start

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _wait_gone(live: list, timeout: float) -> list:
    """Until each process has exited (a zombie counts: it runs nothing), at most `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        live = [(left, h) for left, h in live if not h.gone()]
        remaining = deadline - time.monotonic()
        if not live or remaining <= 0:
            return live
        fds = [h.fd for _, h in live if h.fd is not None]
        if len(fds) == len(live):
            select.select(fds, [], [], remaining)  # a pidfd is readable once its process exits
        else:
            time.sleep(min(0.02, remaining))


def _leftover(stamp: Stamp, att: RecordedAttempt, found: str) -> Leftover:
    try:
        with open(f"/proc/{stamp.pid}/comm") as f:
            name = f.read().strip()
    except OSError:
        name = "?"
    return Leftover(stamp, att.attempt, name, found)


def _running() -> dict[int, Stamp]:
    """Every running process's stamp (one read of /proc/PID/stat each)."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (s := stamp_of(int(name))) is not None:
            table[s.pid] = s
    return table


def _ancestors() -> list[int]:
    """This process's parents up to init: never ended, whatever session they share."""
    found, pid = [], os.getppid()
    while pid > 1 and len(found) < 64 and pid not in found:
        found.append(pid)
        pid = parent_of(pid) or 0
    return found
