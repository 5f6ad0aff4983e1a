"""Every descendant is ended (issue 23): workers that exec with an empty environment and leave the
child's session are still the run's, found by what the kernel says.

Real processes throughout (fixtures/bin/tree-child's `hiding-workers`: `sleep 600` execs with an
empty environment); each test SIGKILLs whatever it started and asserts with psutil that nothing is
left.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from .conftest import FIXTURES
from .test_process_tree import wait_for

TREE_CHILD = [sys.executable, str(FIXTURES / "bin" / "tree-child")]
TRAINVISOR = [sys.executable, "-m", "trainvisor"]


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init, but runs nothing)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()]


class Started:
    """Every pid a test learns of, SIGKILLed at its end, and asserted gone."""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.popens: list[subprocess.Popen] = []

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        proc = subprocess.Popen(argv, **kw)
        self.popens.append(proc)
        self.pids.add(proc.pid)
        return proc

    def cleanup(self) -> None:
        for pid in self.pids:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        for proc in self.popens:
            proc.wait(timeout=10)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        left = [pid for pid in self.pids if running(pid)]
        assert left == [], f"processes left behind: {left}"


@pytest.fixture
def started():
    s = Started()
    try:
        yield s
    finally:
        s.cleanup()


def run_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("COLUMNS", "LINES", "TERM", "NO_COLOR", "FORCE_COLOR"):
        env.pop(name, None)
    return dict(env, LANG="C.UTF-8", LC_ALL="C.UTF-8", TZ="UTC", PYTHONIOENCODING="utf-8")


def test_workers_that_exec_with_an_empty_environment_and_setsid_are_ended_when_trainvisor_exits(started, tmp_path):
    go = tmp_path / "go"
    proc = started.popen([*TRAINVISOR, "run", "--run-dir", str(tmp_path / "run"), "--parser", "generic", "--",
                          *TREE_CHILD, "hiding-workers", str(tmp_path), "--group", "2", "--setsid", "3",
                          "--exit", "3", "--wait-for", str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=run_env())
    assert proc.stdout.readline() == b"workers 5\n"
    workers = pids_in(tmp_path / "workers")
    started.pids.update(workers)
    child = psutil.Process(workers[0]).ppid()
    # What makes them hard to find: no token in their environment, three outside the child's session.
    assert [open(f"/proc/{p}/environ", "rb").read() for p in workers] == [b""] * 5
    assert [os.getsid(p) == child for p in workers] == [True, True, False, False, False]
    go.touch()  # the child exits 3; its five workers run on, re-parented to trainvisor
    rc = proc.wait(timeout=60)
    err = proc.stderr.read().decode()
    assert rc == 3, err
    assert [p for p in workers if running(p)] == []
    assert "holds its stdout open" not in err and "holds its stderr open" not in err


def test_an_in_process_supervisor_never_ends_its_callers_own_processes(started, tmp_path):
    """A pytest process running a Supervisor as subreaper: its servers are its children too. One
    started before the child (the host's), one started while it runs in a session of its own and
    named by `own_pids`, one in the caller's own session: all three live on; the workers do not."""
    from trainvisor import Supervisor

    import threading

    before = started.popen(["sleep", "600"], start_new_session=True)
    go = tmp_path / "go"
    servers: list[subprocess.Popen] = [before]

    def start_servers_then_let_the_child_exit() -> None:
        wait_for(lambda: (tmp_path / "workers").exists(), 30, "the workers")
        servers.append(started.popen(["sleep", "600"], start_new_session=True))  # named in own_pids
        servers.append(started.popen(["sleep", "600"]))  # the caller's own session
        started.pids.update(pids_in(tmp_path / "workers"))
        go.touch()

    helper = threading.Thread(target=start_servers_then_let_the_child_exit)
    helper.start()
    sup = Supervisor([*TREE_CHILD, "hiding-workers", str(tmp_path), "--group", "1", "--setsid", "2", "--exit", "0",
                      "--wait-for", str(go)],
                     subreaper=True, stdout_fd=None, stderr_fd=None, own_pids=lambda: [s.pid for s in servers[1:2]])
    try:
        result = sup.run()
    finally:
        helper.join()
    workers = pids_in(tmp_path / "workers")
    assert result.exit_code == 0 and len(servers) == 3
    assert [p for p in workers if running(p)] == []
    assert [running(s.pid) for s in servers] == [True, True, True]
    assert all(s.poll() is None for s in servers)  # nobody reaped them but their owner (us)
