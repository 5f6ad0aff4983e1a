"""The run's process record (RUN_DIR/processes.jsonl): every process of each attempt's tree as the
kernel names it, so a later trainvisor on the same run directory can end what a killed one left.

trainvisor SIGKILLed cannot end its child's tree: the child's group gets the death signal, but
workers that outlive it, or ignore it, and the ones in sessions of their own run on with ppid 1. What
this record holds lets the next start find them (supervisor/leftovers.py), and never a stranger:
a process is named by its pid *and* its start time (`procfs.Stamp`), which a reused pid does not
share. One JSON object a line, each appended with one write (whole, even when killed mid-run):

    {"attempt": 2, "space": ID, "supervisor": STAMP, "child": STAMP}  the child started
    {"attempt": 2, "seen": [STAMP, ...]}                               descendants first seen
    {"attempt": 2, "ended": TICKS}                                     the tree was ended

with STAMP = [pid, start, pgid, sid], times in clock ticks since boot, ID the boot's and the PID
namespace's (`procfs.pid_space`: another container's pids name nothing here). While the child runs, the
file's modification time is touched with each look at the tree (twice a second): the last sign of
life of an attempt that never wrote its end.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Iterable, NamedTuple, Optional

from .procfs import TICKS, Stamp, pid_space, stamp_of, ticks_now

__all__ = ["RECORD_NAME", "ProcessRecord", "RecordedAttempt", "read_record"]

log = logging.getLogger("trainvisor.supervisor")

RECORD_NAME = "processes.jsonl"


class ProcessRecord:
    """Appends one attempt's processes to the record; a record that cannot be written (a full
    disk) is logged once and costs the training nothing."""

    def __init__(self, path: Path, *, attempt: int) -> None:
        self.path = Path(path)
        self.attempt = attempt
        self._fd: Optional[int] = None
        self._failed = False

    def begin(self, child_pid: int) -> None:
        """The child has started (its own session and group, its pid their id)."""
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            self._fail(exc)
            return
        me, child = stamp_of(os.getpid()), stamp_of(child_pid, exited=True)
        if child is not None:
            self._write({"space": pid_space(), "supervisor": me and list(me), "child": list(child)})

    def seen(self, pids: Iterable[int]) -> None:
        """Processes the tree was first seen with (the child among them, at the first look)."""
        stamps = [list(s) for s in map(stamp_of, pids) if s is not None]
        if stamps:
            self._write({"seen": stamps})

    def alive(self) -> None:
        """The attempt's sign of life: the record's modification time, now."""
        if self._fd is not None:
            try:
                os.utime(self._fd)
            except OSError as exc:
                self._fail(exc)

    def end(self) -> None:
        """The tree is ended: nothing of this attempt should be running any more."""
        self._write({"ended": ticks_now()})
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self, fields: dict) -> None:
        if self._fd is None:
            return
        line = json.dumps({"attempt": self.attempt, **fields}, separators=(",", ":")) + "\n"
        try:
            os.write(self._fd, line.encode())
        except OSError as exc:
            self._fail(exc)

    def _fail(self, exc: OSError) -> None:
        if not self._failed:
            self._failed = True
            log.warning("could not write the run's process record %s: %s (a later start cannot end "
                        "what this attempt leaves running)", self.path, exc.strerror or exc)


class RecordedAttempt(NamedTuple):
    """One attempt as the record tells it. `last`: the latest start time a process of its tree
    can have (its end, the next attempt's start, or the record's last sign of life). A
    NamedTuple: every run loads this module, and a frozen dataclass costs ~0.5 ms to define."""

    attempt: int
    space: str
    supervisor: Optional[Stamp]
    child: Stamp
    seen: tuple[Stamp, ...]
    last: int


def read_record(path: Path) -> list[RecordedAttempt]:
    """The attempts `path` records (none when it does not exist); lines it cannot read are skipped."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
            last_touch = os.fstat(f.fileno()).st_mtime
    except FileNotFoundError:
        return []
    begun: list[dict] = []
    for line in raw.splitlines():
        try:
            entry = json.loads(line)
            n = int(entry["attempt"])
        except (ValueError, KeyError, TypeError):
            continue
        if "child" in entry:
            begun.append({"n": n, "entry": entry, "seen": [], "ended": None})
        elif begun and begun[-1]["n"] == n:
            if "seen" in entry:
                begun[-1]["seen"].extend(entry["seen"])
            elif "ended" in entry:
                begun[-1]["ended"] = entry["ended"]
    return _attempts(begun, _ticks_at(last_touch))


def _attempts(begun: list[dict], touched: int) -> list[RecordedAttempt]:
    found = []
    for i, b in enumerate(begun):
        try:
            child = Stamp(*map(int, b["entry"]["child"]))
            sup = b["entry"].get("supervisor")
            last = b["ended"] if b["ended"] is not None else (
                _start_of(begun[i + 1]) if i + 1 < len(begun) else touched)
            found.append(RecordedAttempt(b["n"], str(b["entry"].get("space", "")),
                                         Stamp(*map(int, sup)) if sup else None, child,
                                         tuple(Stamp(*map(int, s)) for s in b["seen"]), int(last)))
        except (ValueError, TypeError):
            continue
    return found


def _start_of(b: dict) -> int:
    return int(b["entry"]["child"][1])


def _ticks_at(wall: float) -> int:
    """A wall-clock time (a file's mtime) in boot ticks, as of now."""
    return ticks_now() - int((time.time() - wall) * TICKS)
