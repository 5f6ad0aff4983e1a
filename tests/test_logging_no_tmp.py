"""Issue 21: the run log's socket lives beside the log (in the run directory), never in /tmp, so
a SIGKILLed trainvisor leaves nothing there; where a path beside the log is too long for a
socket, it is bound in the abstract namespace and the address names it in a private file."""
from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import psutil

from trainvisor.logging import LogWriterServer, MultiProcessingLogHandler

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
# Logs into the run log (its writer named by TRAINVISOR_LOG_ADDRESS), says its pid, waits; told
# to stop (SIGTERM: trainvisor's parent-death signal) it leaves a mark and exits at once.
CHILD = """
import logging, os, signal, time
from trainvisor.logging import attach
attach()
def on_term(signum, frame):
    open("got-term", "w").close()
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
logging.getLogger("child").warning("child ready")
print(os.getpid(), flush=True)
time.sleep(60)
"""


def run_then_sigkill(tmp_path, *options: str, kill_child: bool) -> Path:
    """`trainvisor run` of CHILD with a TMPDIR of its own, SIGKILLed once the child runs (the
    child too when `kill_child`); returns that TMPDIR once both are gone."""
    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    (tmp_path / "child.py").write_text(CHILD)
    env = {**os.environ, "TMPDIR": str(own_tmp)}
    tv = subprocess.Popen(TRAINVISOR + ["run", "-q", "--run-dir", "r", *options, "--", sys.executable, "child.py"],
                          cwd=tmp_path, stdout=subprocess.PIPE, env=env)
    pid = None
    try:
        pid = int(tv.stdout.readline())
        child = psutil.Process(pid)
        assert [p.name for p in (tmp_path / "r").iterdir() if p.name.startswith(".tvlog-")]  # where it is
        tv.kill()
        if kill_child:
            child.kill()
        assert tv.wait(timeout=30) == -9
        child.wait(10)  # gone (reaped by whoever inherited it)
        assert not psutil.pid_exists(pid)
    finally:
        if tv.poll() is None:
            tv.kill()
            tv.wait()
        tv.stdout.close()
        if pid is not None and psutil.pid_exists(pid):
            psutil.Process(pid).kill()
    return own_tmp


def stale_socket_dirs(run_dir: Path) -> list[str]:
    return [p.name for p in run_dir.iterdir() if p.name.startswith(".tvlog-")]


def test_a_sigkilled_trainvisor_leaves_nothing_in_tmp(tmp_path):
    own_tmp = run_then_sigkill(tmp_path, kill_child=False)
    assert (tmp_path / "got-term").exists()  # the parent-death signal reached the training
    assert list(own_tmp.iterdir()) == []
    assert len(stale_socket_dirs(tmp_path / "r")) == 1  # the dead writer's, in the run directory


def test_with_the_child_sigkilled_too_the_next_writer_removes_the_socket_directory(tmp_path):
    own_tmp = run_then_sigkill(tmp_path, "--on-supervisor-death", "keep", kill_child=True)
    assert list(own_tmp.iterdir()) == [] and len(stale_socket_dirs(tmp_path / "r")) == 1
    # The next writer of the run's log (here `trainvisor resume`) removes what the dead one left.
    done = subprocess.run(TRAINVISOR + ["resume", "r"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(own_tmp)}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert stale_socket_dirs(tmp_path / "r") == [] and list(own_tmp.iterdir()) == []


def test_a_log_whose_folder_is_too_deep_for_a_socket_path_gets_an_abstract_socket(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    with LogWriterServer.start(deep / "run.log") as server:
        assert len(server.address.encode()) > 107 and os.path.dirname(server.directory) == str(deep)
        st = os.stat(server.address)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        handler = MultiProcessingLogHandler.connect(server.address, formatter=logging.Formatter("%(message)s"))
        record = logging.LogRecord("t", logging.INFO, __file__, 1, "through the abstract socket", None, None)
        handler.emit(record)
        handler.close()
    assert (deep / "run.log").read_text() == "through the abstract socket\n"
    assert sorted(p.name for p in deep.iterdir()) == ["run.log"]  # socket directory and lock gone
