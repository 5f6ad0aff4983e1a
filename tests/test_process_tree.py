"""The process tree: orphans reaped while the child runs, descendants that left
the tree ended at shutdown, and shutdown bounded by the kill timeout.

Each test runs fixtures/bin/supervise (the `Supervisor` API in a subprocess) in
its own session; every process it starts carries a test marker in its
environment, and whatever is left is SIGKILLed when the test ends, pass or fail.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from typing import Callable, Optional, Sequence

import psutil
import pytest

from trainvisor.supervisor.reaper import Reaper

from .conftest import FIXTURES

PY = sys.executable
SUPERVISE = [PY, str(FIXTURES / "bin" / "supervise")]
TREE_CHILD = [PY, str(FIXTURES / "bin" / "tree-child")]
MARK = "TRAINVISOR_TEST_MARK"


class Drivers:
    """Starts `supervise` processes and ends every process they leave."""

    def __init__(self) -> None:
        self.mark = uuid.uuid4().hex
        self.procs: list[subprocess.Popen] = []

    def start(self, args: Sequence[str], *, prefix: Sequence[str] = (),
              setup: Optional[Callable[[], None]] = None) -> subprocess.Popen:
        env = dict(os.environ, **{MARK: self.mark})
        proc = subprocess.Popen([*prefix, *SUPERVISE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, start_new_session=True, preexec_fn=setup)
        self.procs.append(proc)
        return proc

    def marked(self) -> list[psutil.Process]:
        """Every process carrying this test's marker, wherever it was re-parented."""
        needle = f"{MARK}={self.mark}".encode()
        found = []
        for p in psutil.process_iter():
            try:
                with open(f"/proc/{p.pid}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(p)
            except OSError:
                pass
        return found

    def cleanup(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for p in self.marked():
            try:
                p.kill()
            except psutil.Error:
                pass
        for proc in self.procs:
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()


@pytest.fixture
def drivers():
    d = Drivers()
    try:
        yield d
    finally:
        d.cleanup()


def wait_for(predicate: Callable[[], object], timeout: float, what: str,
             detail: Optional[Callable[[], str]] = None) -> object:
    """The predicate's first true value within `timeout`; else an AssertionError naming `what`
    (and `detail()`, the state that a timeout should show, taken at that moment)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                                 + (f": {detail()}" if detail is not None else ""))
        time.sleep(0.02)


def children_of(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children()
    except psutil.Error:
        return []


def is_death_watcher(p: psutil.Process) -> bool:
    """trainvisor's own child (supervisor/deathwatch.py), not one of the training's tree."""
    try:
        return p.name() == "tv-deathwatch"
    except psutil.Error:
        return False


def cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def status(p: psutil.Process) -> str:
    try:
        return p.status()
    except psutil.Error:
        return "gone"


def pid_namespaces_available() -> Optional[str]:
    """Why `unshare --pid --fork --mount-proc` cannot be used here, or None."""
    try:
        done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                              capture_output=True, timeout=10)
    except FileNotFoundError:
        return "unshare(1) is not installed"
    if done.returncode != 0:
        return f"unshare --pid --fork --mount-proc fails here (needs root): {done.stderr.decode().strip()}"
    return None


@pytest.mark.parametrize("as_pid1", [False, True], ids=["subreaper", "pid1"])
def test_fifty_orphans_are_reaped_while_the_child_runs(drivers, as_pid1):
    if as_pid1 and (reason := pid_namespaces_available()):
        pytest.skip(reason)
    prefix = ["unshare", "--pid", "--fork", "--mount-proc"] if as_pid1 else []
    flags = [] if as_pid1 else ["--subreaper"]
    proc = drivers.start([*flags, "--", *TREE_CHILD, "orphans", "50", "--max-life", "0.6"], prefix=prefix)
    assert proc.stdout.readline() == b"forked 50\n"
    # The supervising process, seen from here (under unshare it is unshare's child).
    supervisor = children_of(proc.pid)[0].pid if as_pid1 else proc.pid
    child = wait_for(lambda: [p for p in children_of(supervisor) if "tree-child" in cmdline(p)], 5, "the child")[0]

    def orphans() -> list[psutil.Process]:  # not the child, nor trainvisor's death watcher
        return [p for p in children_of(supervisor) if p.pid != child.pid and not is_death_watcher(p)]

    def left() -> str:  # what a timeout names: each process still there, as this test sees it
        return ", ".join(f"{p.pid} {status(p)} {cmdline(p)[:60]!r}" for p in orphans()
                         if status(p) not in ("zombie", "gone"))

    # They sleep at most 0.6 s; the bound leaves a loaded 2-core CI its slack (a timeout names them)
    wait_for(lambda: all(status(p) in ("zombie", "gone") for p in orphans()), 15,
             "every orphan to exit", detail=left)
    wait_for(lambda: not orphans(), 1.0, "no orphan left <defunct>: " + repr([p.pid for p in orphans()]))
    assert status(child) not in ("zombie", "gone")  # the run goes on
    os.kill(supervisor, signal.SIGTERM)
    assert proc.wait(timeout=10) == 143


def test_a_setsid_double_forked_descendant_is_ended_within_the_kill_timeout(drivers, tmp_path):
    for subreaper in (True, False):  # re-parented to us, or to init: found by the run's token
        pidfile = tmp_path / f"descendant-{subreaper}.pid"
        proc = drivers.start([*(["--subreaper"] if subreaper else []), "--kill-timeout", "1", "--",
                              *TREE_CHILD, "setsid-descendant", str(pidfile)])
        assert proc.stdout.readline() == b"descendant started\n"
        descendant = psutil.Process(int(wait_for(lambda: pidfile.exists() and pidfile.read_text(), 5, "the descendant's pid")))
        assert os.getsid(descendant.pid) != os.getsid(proc.pid)  # it left the child's session
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=10)
        elapsed = time.monotonic() - t0
        err = proc.stderr.read().decode()
        assert rc == 143
        assert elapsed <= 1.0 + 1.0, f"shutdown took {elapsed:.2f}s with a 1s kill timeout"
        gone, alive = psutil.wait_procs([descendant], timeout=2)
        assert alive == [], f"setsid descendant survived (subreaper={subreaper})"
        # The escalation is logged step by step.
        assert "SIGTERM sent to the child; SIGKILL to its tree in 1.0s unless it exits" in err
        assert "SIGTERM sent to 1 process(es) left of the child's tree" in err
        assert re.search(r"waited [01]\.\ds: 1 process\(es\) still running, SIGKILL to the tree", err), err
        assert "1 process(es) ended by SIGKILL" in err


def _exit_now() -> None:
    os._exit(0)


def test_the_reaper_spares_the_hosts_own_children_and_reaps_the_rest():
    keep = []
    reaper = Reaper(keep=lambda: keep)
    same_session = os.fork()
    if same_session == 0:
        _exit_now()
    new_session = os.fork()
    if new_session == 0:
        os.setsid()
        _exit_now()
    kept = os.fork()
    if kept == 0:
        os.setsid()
        _exit_now()
    keep.append(kept)
    try:
        wait_for(lambda: all(status(psutil.Process(p)) == "zombie" for p in (same_session, new_session, kept)),
                 5, "the three children to exit")
        assert reaper.reap() == 1
        assert status(psutil.Process(same_session)) == "zombie"
        assert status(psutil.Process(kept)) == "zombie"
        with pytest.raises(ChildProcessError):
            os.waitpid(new_session, 0)
    finally:
        assert os.waitpid(same_session, 0)[0] == same_session  # its status was left to us
        assert os.waitpid(kept, 0)[0] == kept


def test_a_pipe_held_outside_the_tree_costs_half_a_second_not_two_per_reader(drivers, tmp_path):
    # A descendant with an empty environment in its own session: nothing marks it
    # as the child's, so it is not ended, and it keeps both pipes open.
    pidfile = tmp_path / "stray.pid"
    proc = drivers.start(["--kill-timeout", "1", "--", *TREE_CHILD, "setsid-descendant", str(pidfile), "--clear-env"])
    try:
        assert proc.stdout.readline() == b"descendant started\n"
        wait_for(lambda: pidfile.exists() and pidfile.read_text(), 5, "the stray's pid")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=10)
        elapsed = time.monotonic() - t0
        assert rc == 143
        assert elapsed <= 1.0 + 1.0, f"shutdown took {elapsed:.2f}s with a 1s kill timeout"
        assert b"holds its stdout open; stopped reading" in proc.stderr.read()
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_the_kernels_list_of_children_names_the_same_processes_as_a_scan_of_proc():
    """The reaper reads /proc/self/task/*/children (a few small files) instead of every process's
    stat: both must name the same children, zombies included."""
    from trainvisor.supervisor import reaper

    live = [subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
            for _ in range(3)]
    dead = subprocess.Popen(["/bin/true"])
    try:
        while psutil.Process(dead.pid).status() != psutil.STATUS_ZOMBIE:
            os.sched_yield()
        me = os.getpid()
        scanned = sorted(s.pid for s in reaper._proc_stats() if s.ppid == me)
        assert reaper._listed_children() is not None  # this kernel keeps the list
        assert sorted(reaper._child_pids()) == scanned and {p.pid for p in live} | {dead.pid} <= set(scanned)
        assert dead.pid in reaper._zombie_children() and not {p.pid for p in live} & set(reaper._zombie_children())
    finally:
        for p in live:
            p.stdin.close()
            p.wait()
        dead.wait()


def test_an_in_process_run_leaves_its_caller_no_subreaper(tmp_path):
    # A Run makes its process a subreaper for its child's tree (a double-forked grandchild is still
    # found), and undoes it after: a test session or a notebook must not go on adopting every
    # orphan of the machine's later programs (they stayed zombies under the test session).
    import ctypes
    import sys

    from trainvisor import Run, RunConfig
    from trainvisor.config import RunDirConfig

    def subreaper() -> int:
        flag = ctypes.c_int(-1)
        assert ctypes.CDLL(None, use_errno=True).prctl(37, ctypes.byref(flag), 0, 0, 0) == 0  # PR_GET_CHILD_SUBREAPER
        return flag.value

    assert subreaper() == 0
    seen = []
    go = tmp_path / "go"
    # the child waits (at most 60 s) until the hook has looked, so the hook looks while it runs
    child = ("import os, sys, time\nprint('loss=1', flush=True)\nend = time.time() + 60\n"
             f"while not os.path.exists({str(go)!r}) and time.time() < end:\n    time.sleep(0.01)\n")

    def look(record) -> None:  # on the pipeline thread
        seen.append(subreaper())
        go.touch()

    Run(RunConfig(command=(sys.executable, "-c", child), run=RunDirConfig(dir=str(tmp_path / "r"))),
        hooks=[look], stdout_fd=None, stderr_fd=None).run()
    assert seen == [1]  # while the child ran
    assert subreaper() == 0
