"""Starting the child and ending its whole process tree."""
from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import time
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional, Sequence

from ..errors import CommandNotExecutable, CommandNotFound
from .procfs import children_of, descendants_of, nothing_left, wait_stopped
from .kernel import Kernel

if TYPE_CHECKING:
    import psutil

__all__ = [
    "stop_group",
    "TREE_TOKEN_ENV",
    "spawn_child",
    "exit_code_of",
    "become_subreaper",
    "stop_subreaper",
    "ProcessTree",
]

log = logging.getLogger("trainvisor.supervisor")

# Every process of the child's tree inherits this variable with the run's token,
# so a descendant that left the tree (setsid, double fork, re-parented to init)
# is still found at shutdown through /proc/PID/environ.
TREE_TOKEN_ENV = "TRAINVISOR_TREE_TOKEN"

# psutil waits for each process it signalled; a SIGKILLed one is gone in milliseconds.
_KILL_WAIT = 1.0
_POLL = 0.02


def become_subreaper() -> bool:
    """Make orphaned descendants of the child re-parent to us (Linux), so a
    grandchild that double-forked is still found and ended at shutdown; also
    makes trainvisor reap zombies when it runs as a container's PID-1 daemon.
    True when this call made the process one (it was not): the caller undoes it
    with `stop_subreaper` once its child is over, so a library call does not leave
    a process (a test session, a notebook) adopting strangers' orphans for ever."""
    kernel = Kernel()
    if kernel.child_subreaper():
        return False
    return kernel.set_child_subreaper(True)


def stop_subreaper() -> None:
    """Undo `become_subreaper` (orphans re-parent to init again)."""
    Kernel().set_child_subreaper(False)


def spawn_child(
    argv: Sequence[str],
    *,
    shell: bool = False,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    popen: Callable[..., subprocess.Popen] = subprocess.Popen,
    setup: Optional[Callable[[], None]] = None,
    terminal: Optional[int] = None,
) -> subprocess.Popen:
    """Start the child in its own session with piped stdout/stderr (both on `terminal`, a pty's
    slave fd, when given).

    `PYTHONUNBUFFERED=1` is added so a Python child does not hold its output in an
    8 KiB buffer (its lines would reach the parsers seconds late). `setup` runs in
    the child between fork and exec (signal dispositions; its pid to the death watcher, or a
    parent-death signal).
    """
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    args: Sequence[str] | str
    if shell:
        args = " ".join(argv) if len(argv) > 1 else argv[0]
    else:
        args = list(argv)
    try:
        return popen(
            args,
            shell=shell,
            cwd=cwd,
            env=child_env,
            stdin=None,
            stdout=subprocess.PIPE if terminal is None else terminal,
            stderr=subprocess.PIPE if terminal is None else terminal,
            start_new_session=True,
            close_fds=True,
            bufsize=0,
            preexec_fn=setup,
        )
    except FileNotFoundError as exc:
        if cwd is not None and not os.path.isdir(cwd):
            raise CommandNotFound(f"working directory not found: {cwd}") from exc
        raise CommandNotFound(f"{argv[0]}: command not found") from exc
    except PermissionError as exc:
        raise CommandNotExecutable(f"{argv[0]}: permission denied") from exc
    except OSError as exc:
        if exc.errno == errno.ENOEXEC:
            raise CommandNotExecutable(f"{argv[0]}: cannot execute: exec format error") from exc
        if exc.errno in (errno.EISDIR, errno.EACCES):
            raise CommandNotExecutable(f"{argv[0]}: cannot execute: {exc.strerror}") from exc
        raise CommandNotFound(f"{argv[0]}: cannot start: {exc.strerror}") from exc


def stop_group(pgid: int, sig: int) -> None:
    """Job control for a group in its own session (`sig` is TSTP, TTIN or TTOU): the group is sent
    SIGSTOP in its place, as dumb-init does in its setsid mode. Why not `sig` first: the group is
    orphaned in its own session, where the kernel discards these three for a process without a
    handler; and one with a handler (a Python program prints or saves) runs it whenever it is next
    scheduled, which may be after a SIGSTOP sent right behind it, so it would act on a Ctrl-Z only
    once continued, out of order with the SIGCONT. Returns once the group's leader has stopped (at
    most a second or so)."""
    try:
        os.killpg(pgid, signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        return
    wait_stopped(pgid, timeout=1.0)


def exit_code_of(returncode: int) -> int:
    """A shell's convention: 128+N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class ProcessTree:
    """The child and every process it started, found through psutil.

    Descendants are remembered while the child lives, so ones that outlive it
    (re-parented to us as subreaper, or to init) are still ended. As subreaper,
    what the kernel re-parents to us is the tree's whatever its environment says;
    at shutdown, processes that carry the run's token in their environment are
    found too, wherever they were re-parented (to init, when not a subreaper).
    """

    def __init__(self, child_pid: int, *, own_pids: Callable[[], Iterable[int]] = lambda: (),
                 token: Optional[str] = None, adopts: bool = False, before: Iterable[int] = (),
                 on_new: Optional[Callable[[list[int]], None]] = None) -> None:
        self.child_pid = child_pid
        self._own_pids = own_pids
        self._marker = f"{TREE_TOKEN_ENV}={token}".encode() if token else None
        self._known: dict[int, float] = {}  # pid -> create_time, to avoid killing a reused pid
        # As subreaper (or PID 1) every orphan of the child's tree becomes our child, whatever its
        # environment says: a child of ours is the tree's unless it was there before the child
        # (`before`: the host's), runs in our own session (the tree never can: the child has a
        # session of its own) or is named by `own_pids`.
        self._adopts = adopts
        self._before = frozenset(before)
        self._own_sid = os.getsid(0)
        self._on_new = on_new  # told each pid the tree is first seen with (the run's process record)

    def refresh(self, *, sweep: bool = False) -> "list[psutil.Process]":
        """The live processes of the tree; `sweep` also reads every process's
        environment for the run's token (a few milliseconds: at shutdown only)."""
        if not self._known and nothing_left(self.child_pid, self._marker, self._own_pids()):
            return []  # the common end of a run, found without importing psutil (~20 ms)
        import psutil

        procs: dict[int, psutil.Process] = {}
        try:
            child = psutil.Process(self.child_pid)
            procs[child.pid] = child
            for p in child.children(recursive=True):
                procs[p.pid] = p
        except psutil.Error:
            pass
        own = set(self._own_pids())
        own.add(os.getpid())
        self._add_orphans(procs, own)
        if sweep and self._marker is not None:
            self._add_marked(procs, own, psutil.process_iter())
        self._add_known(procs)
        return [p for p in procs.values() if _running(p)]

    def _add_orphans(self, procs: "dict[int, psutil.Process]", own: set[int]) -> None:
        """Orphans re-parented to us (as subreaper): every adopted one with its descendants, or
        (not adopting) those of the child's session or carrying the token; never a process of
        our own (a server a test started)."""
        import psutil

        try:
            ours = psutil.Process().children(recursive=True)
        except psutil.Error:
            return
        # Our direct children from the kernel's list (no second walk of every process).
        direct = children_of(os.getpid()) - {-1} if self._adopts else set()
        for pid in direct - own - procs.keys():
            if self._adopted(pid):
                for found in (pid, *descendants_of(pid)):
                    try:
                        procs.setdefault(found, psutil.Process(found))
                    except psutil.Error:
                        pass
        rest = []
        for p in ours:
            if p.pid in own or p.pid in procs:
                continue
            try:
                if os.getsid(p.pid) == self.child_pid:
                    procs[p.pid] = p
                    continue
            except OSError:
                continue
            rest.append(p)
        self._add_marked(procs, own, rest)

    def _adopted(self, pid: int) -> bool:
        """A child of ours that the host did not start: not there before the child, not in our session."""
        if pid in self._before:
            return False
        try:
            return os.getsid(pid) != self._own_sid
        except OSError:
            return False

    def _add_marked(self, procs: "dict[int, psutil.Process]", own: set[int],
                    candidates: "Iterable[psutil.Process]") -> None:
        marker = self._marker
        if marker is None:
            return
        for p in candidates:
            if p.pid in own or p.pid in procs:
                continue
            try:
                with open(f"/proc/{p.pid}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        procs[p.pid] = p
            except OSError:
                pass

    def _add_known(self, procs: "dict[int, psutil.Process]") -> None:
        import psutil

        for pid, ct in list(self._known.items()):
            if pid not in procs:
                try:
                    p = psutil.Process(pid)
                    if p.create_time() == ct:
                        procs[pid] = p
                except psutil.Error:
                    self._known.pop(pid, None)
        new = []
        for pid, p in procs.items():
            if pid not in self._known:
                try:
                    self._known[pid] = p.create_time()
                    new.append(pid)
                except psutil.Error:
                    pass
        if new and self._on_new is not None:
            self._on_new(new)

    def terminate_all(self, *, timeout: float) -> int:
        """SIGTERM every live process of the tree, SIGKILL what is left after
        `timeout`; returns how many had to be killed. Each step is logged."""
        procs = self.refresh(sweep=True)
        if not procs:
            return 0
        log.info("SIGTERM sent to %d process(es) left of the child's tree", len(procs))
        for p in procs:
            _send(p, signal.SIGTERM)
        alive = _wait_dead(self._not_child(procs), timeout)
        if not alive:
            log.info("%d process(es) ended by SIGTERM", len(procs))
            return 0
        log.warning("waited %.1fs: %d process(es) still running, SIGKILL to the tree", timeout, len(alive))
        return self.kill_all()

    def kill_all(self) -> int:
        """SIGKILL the whole tree (and what it forks meanwhile); returns how many."""
        killed = 0
        for _ in range(3):  # a dying parent may still fork: repeat until quiet
            procs = self.refresh(sweep=True)
            if not procs:
                break
            for p in procs:
                if _send(p, signal.SIGKILL):
                    killed += 1
            _wait_dead(self._not_child(procs), _KILL_WAIT)
        log.info("%d process(es) ended by SIGKILL", killed)
        return killed

    def _not_child(self, procs: "list[psutil.Process]") -> "list[psutil.Process]":
        """Popen waits for our direct child: its end is seen there."""
        return [p for p in procs if p.pid != self.child_pid]


def _wait_dead(procs: "list[psutil.Process]", timeout: float) -> "list[psutil.Process]":
    """Wait until each process is gone or a zombie; returns those still running.

    Not psutil.wait_procs: it waits for a zombie until its parent reaps it, and
    an orphan's parent (init, a container's PID 1) may take its time.
    """
    deadline = time.monotonic() + timeout
    alive = procs
    while True:
        alive = [p for p in alive if _running(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(min(_POLL, max(0.0, deadline - time.monotonic())))


def _running(p: "psutil.Process") -> bool:
    import psutil

    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _send(p: "psutil.Process", sig: int) -> bool:
    import psutil

    try:
        p.send_signal(sig)
        return True
    except psutil.Error:
        return False
