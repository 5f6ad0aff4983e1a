"""The child's one death signal: when trainvisor dies without ending the training (SIGKILL), the
death watcher (supervisor/deathwatch.py, _native/_deathwatch.c) sends SIGTERM once, so a
training that takes a second SIGTERM as "abort now" finishes the save the first one started.

Real processes throughout: `trainvisor run` over tests/term_save_child.py, which counts the
SIGTERMs the kernel delivers to it and aborts its save at a second one. PR_SET_PDEATHSIG alone
delivered two or three here (a SIGKILLed trainvisor hands its children from each dying thread
to the next, with a signal each time), and the child aborted its save in most runs.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Optional

import psutil
import pytest

from trainvisor import Supervisor
from trainvisor.supervisor.deathwatch import DeathWatch, native_watcher
from trainvisor.supervisor.process import spawn_child
from trainvisor.supervisor.signals import child_setup

from .test_process_tree import is_death_watcher, wait_for

PY = sys.executable
TRAINVISOR = [PY, "-m", "trainvisor"]
CHILD = str(Path(__file__).with_name("term_save_child.py"))
SAVE_BYTES = 64 * 65536  # term_save_child.py's whole save

needs_watcher = pytest.mark.skipif(native_watcher() is None, reason="the death watcher is not built here "
                                   "(or Linux < 5.3: no pidfd_open, or TRAINVISOR_PURE_PYTHON is set)")


def _ended(p: psutil.Process) -> bool:
    """Gone, or a zombie waiting for whichever process it was re-parented to."""
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _watchers(pid: int) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(pid).children() if is_death_watcher(p)]
    except psutil.Error:
        return []


class Launched:
    """`trainvisor run` over the counting child; ends every process it saw when the test ends."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.tv: Optional[subprocess.Popen] = None
        self.seen: list[psutil.Process] = []

    def start(self, **popen_args: object) -> tuple[psutil.Process, psutil.Process]:
        """trainvisor, started; returns (its child, its watcher) once the child is ready."""
        self.tv = subprocess.Popen(TRAINVISOR + ["run", "-q", "--run-dir", "r", "--", PY, CHILD, str(self.folder)],
                                   cwd=self.folder, stdout=subprocess.PIPE, **popen_args)
        word, pid = self.tv.stdout.readline().split()
        assert word == b"ready"
        child = psutil.Process(int(pid))
        self.seen.append(child)
        watchers = _watchers(self.tv.pid)
        self.seen.extend(watchers)
        assert len(watchers) == 1
        return child, watchers[0]

    def counts(self, child: psutil.Process) -> tuple[int, int]:
        """The child probed (it then exits): (SIGTERMs delivered, runs of its SIGTERM handler)."""
        child.send_signal(signal.SIGWINCH)
        wait_for(lambda: _ended(child), 10, "the child to answer the probe")
        delivered = int((self.folder / "delivered").read_text())
        return delivered, (self.folder / "terms").read_text().count("TERM")

    def close(self) -> None:
        if self.tv is not None:
            if self.tv.poll() is None:
                self.tv.kill()
            self.tv.wait()
            self.tv.stdout.close()
        for p in self.seen:
            try:
                p.kill()
            except psutil.Error:
                pass


@pytest.fixture
def launched(tmp_path):
    run = Launched(tmp_path)
    try:
        yield run
    finally:
        run.close()


def _assert_one_term_and_a_whole_save(launched: Launched, child: psutil.Process, watcher: psutil.Process) -> None:
    wait_for(lambda: _ended(watcher), 10, "the watcher to signal and exit")
    wait_for((launched.folder / "save").exists, 10, "the child's save")
    assert not _ended(child)  # a second SIGTERM would have aborted it (exit 2) during the save
    assert (launched.folder / "save").stat().st_size == SAVE_BYTES
    assert launched.counts(child) == (1, 1)


@needs_watcher
def test_a_sigkilled_trainvisor_sends_one_sigterm_and_the_save_completes(launched):
    child, watcher = launched.start()
    assert watcher.ppid() == launched.tv.pid
    launched.tv.kill()
    assert launched.tv.wait(timeout=30) == -signal.SIGKILL
    _assert_one_term_and_a_whole_save(launched, child, watcher)


@needs_watcher
def test_a_sigkill_to_trainvisors_process_group_leaves_the_child_one_sigterm(launched):
    # `kill -9 -PGID` of trainvisor's group takes trainvisor only: the child leads a session of its
    # own (as it always has), and so does the watcher, which then sends the one SIGTERM.
    child, watcher = launched.start(start_new_session=True)
    assert os.getpgid(launched.tv.pid) == launched.tv.pid
    assert os.getsid(watcher.pid) == watcher.pid and os.getsid(child.pid) == child.pid
    os.killpg(launched.tv.pid, signal.SIGKILL)
    launched.tv.wait(timeout=30)
    _assert_one_term_and_a_whole_save(launched, child, watcher)


@needs_watcher
def test_a_watcher_killed_by_hand_is_replaced_and_the_child_still_gets_one_sigterm(launched):
    child, watcher = launched.start()
    watcher.kill()
    # The wait loop notices at its next tree refresh (every 0.5 s) and starts another.
    replaced = wait_for(lambda: [w for w in _watchers(launched.tv.pid) if w.pid != watcher.pid], 10,
                        "a new watcher")
    launched.seen.extend(replaced)
    launched.tv.kill()
    launched.tv.wait(timeout=30)
    _assert_one_term_and_a_whole_save(launched, child, replaced[0])


@needs_watcher
def test_a_trainvisor_that_ends_normally_leaves_no_watcher_and_the_child_one_sigterm(launched):
    child, watcher = launched.start()
    launched.tv.send_signal(signal.SIGTERM)  # forwarded once; the child saves, then the probe ends it
    wait_for((launched.folder / "save").exists, 10, "the child's save")
    assert launched.counts(child) == (1, 1)
    assert launched.tv.wait(timeout=30) == 0  # the child's exit code
    assert _ended(watcher) and not psutil.pid_exists(watcher.pid)  # killed and reaped by trainvisor


@needs_watcher
@pytest.mark.parametrize("thread", ["main", "other"])
def test_the_watcher_exits_without_a_signal_when_the_child_ends_first(thread):
    # This process stands in for trainvisor and stays alive: the pipe never closes, so the
    # watcher's end can only come from the child's. Its exit code is the signal it sent (0: none).
    # Forked from another thread (a library caller's Supervisor), it runs on that thread's stack.
    started: list = []

    def start() -> None:
        watch = DeathWatch.start(signal.SIGTERM)
        started.append(watch)
        started.append(spawn_child([PY, "-c", "pass"], setup=child_setup(signal.SIGTERM, watch)))

    if thread == "main":
        start()
    else:
        runner = threading.Thread(target=start)
        runner.start()
        runner.join()
    watch, proc = started
    try:
        proc.communicate()
        done = wait_for(lambda: os.waitpid(watch.pid, os.WNOHANG)[0] == watch.pid and watch.pid, 10,
                        "the watcher to follow the child's end")
        assert done and proc.returncode == 0
    finally:
        watch.close()


def _anonymous_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))


@needs_watcher
def test_the_watcher_keeps_none_of_trainvisors_memory(launched):
    # A forked copy would keep the old copy of every page trainvisor writes after the fork (its
    # heap, arenas, threads' stacks: 14 MB here within a second); the watcher unmaps them.
    child, watcher = launched.start()
    wait_for(lambda: _anonymous_kib(watcher.pid) < 1024, 10, "the watcher to drop trainvisor's memory")
    assert _anonymous_kib(launched.tv.pid) > 8 * 1024  # what it would otherwise have kept a copy of
    launched.tv.kill()
    launched.tv.wait(timeout=30)
    _assert_one_term_and_a_whole_save(launched, child, watcher)  # and it still does its job


def _death_signal_of_child(tmp_path: Path, **supervisor_args: object) -> bytes:
    """What PR_GET_PDEATHSIG says inside a supervised child."""
    code = ("import ctypes; s = ctypes.c_int(0); ctypes.CDLL(None).prctl(2, ctypes.byref(s), 0, 0, 0); "
            "print(s.value)")
    out = tmp_path / "out"
    with open(out, "wb") as f:
        result = Supervisor([PY, "-c", code], stdout_fd=f.fileno(), forward_signals=False, **supervisor_args).run()
    assert result.exit_code == 0
    return out.read_bytes()


@needs_watcher
def test_with_the_watcher_the_child_has_no_parent_death_signal(tmp_path):
    # Both would make two signals again.
    assert _death_signal_of_child(tmp_path) == b"0\n"


@pytest.mark.parametrize("how", ["not built", "TRAINVISOR_PURE_PYTHON"])
def test_without_the_watcher_the_child_keeps_pr_set_pdeathsig(tmp_path, monkeypatch, how):
    if how == "not built":  # a pure-Python install: the module cannot be imported
        import trainvisor._native

        monkeypatch.setitem(sys.modules, "trainvisor._native._deathwatch", None)
        monkeypatch.delattr(trainvisor._native, "_deathwatch", raising=False)
    else:
        monkeypatch.setenv("TRAINVISOR_PURE_PYTHON", "1")
    assert native_watcher() is None
    assert _death_signal_of_child(tmp_path) == f"{int(signal.SIGTERM)}\n".encode()
    assert _death_signal_of_child(tmp_path, on_supervisor_death="keep") == b"0\n"

