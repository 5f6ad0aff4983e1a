"""Signals through the whole command: when trainvisor itself is SIGKILLed the training is told
(SIGTERM, the default) or left running (`--on-supervisor-death keep`), instead of writing into a
closed pipe; a trainvisor started with SIGINT ignored still forwards Ctrl-C."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
CHILD = """
import os, signal, sys, time
def on_term(signum, frame):
    open('got-term', 'w').close()
    os._exit(0)
signal.signal(signal.SIGTERM, on_term)
open('child.tmp', 'w').write(str(os.getpid()))
os.rename('child.tmp', 'child.pid')  # whole when it appears
time.sleep(60)
"""


def _wait_for(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert path.exists(), f"{path.name} never appeared"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ")[1][0] != "Z"


@pytest.mark.parametrize("choice", ["term", "keep"])
def test_a_killed_trainvisor_tells_the_training_or_leaves_it(tmp_path, choice):
    (tmp_path / "child.py").write_text(CHILD)
    tv = subprocess.Popen(TRAINVISOR + ["run", "-q", "--run-dir", "r", "--on-supervisor-death", choice, "--",
                                        sys.executable, "child.py"], cwd=tmp_path)
    pid = None
    try:
        _wait_for(tmp_path / "child.pid")
        pid = int((tmp_path / "child.pid").read_text())
        tv.kill()
        tv.wait(timeout=30)
        if choice == "term":
            _wait_for(tmp_path / "got-term", 10)
        else:
            time.sleep(0.5)
            assert _alive(pid) and not (tmp_path / "got-term").exists()
    finally:
        if tv.poll() is None:
            tv.kill()
            tv.wait()
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_backgrounded_trainvisor_forwards_sigint_and_the_child_dies_of_it(tmp_path):
    """A script's background job starts with SIGINT ignored; the training must still get Ctrl-C."""
    (tmp_path / "child.py").write_text(
        "import os, time\nopen('child.tmp', 'w').write(str(os.getpid()))\nos.rename('child.tmp', 'child.pid')\n"
        "time.sleep(60)\n")
    tv = subprocess.Popen(TRAINVISOR + ["run", "-q", "--run-dir", "r", "--kill-timeout", "20", "--",
                                        sys.executable, "child.py"], cwd=tmp_path,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        _wait_for(tmp_path / "child.pid")
        started = time.monotonic()
        tv.send_signal(signal.SIGINT)
        assert tv.wait(timeout=15) == 130  # the child died of SIGINT, not of a SIGKILL 20 s later
        assert time.monotonic() - started < 5
    finally:
        if tv.poll() is None:
            tv.kill()
            tv.wait()
