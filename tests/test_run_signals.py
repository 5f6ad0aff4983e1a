"""Signals through the whole command: when trainvisor itself is SIGKILLed the training is told
(SIGTERM, the default) or left running (`--on-supervisor-death keep`), instead of writing into a
closed pipe; a trainvisor started with SIGINT ignored still forwards Ctrl-C."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
# The child says it is ready (its pid, on stdout through trainvisor) once its handlers are set.
# SIGWINCH is a probe: standard signals are delivered, and Python runs their handlers, lowest
# number first, so once the child has answered SIGWINCH (28) a SIGTERM (15) sent before it has
# been handled.
CHILD = """
import os, signal, sys, time
def on_term(signum, frame):
    open('got-term', 'w').close()
    os._exit(0)
def on_probe(signum, frame):
    open('got-probe', 'w').close()
    os._exit(3)
signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGWINCH, on_probe)
print(os.getpid(), flush=True)
time.sleep(60)
"""


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
                                        sys.executable, "child.py"], cwd=tmp_path, stdout=subprocess.PIPE)
    pid = None
    try:
        pid = int(tv.stdout.readline())
        child = psutil.Process(pid)
        tv.kill()
        tv.wait(timeout=30)
        if choice == "term":
            child.wait(10)
            assert (tmp_path / "got-term").exists()
        else:
            # The parent-death signal, were one set, was sent as trainvisor died (before wait returned).
            assert _alive(pid)
            child.send_signal(signal.SIGWINCH)
            child.wait(10)
            assert (tmp_path / "got-probe").exists() and not (tmp_path / "got-term").exists()
    finally:
        if tv.poll() is None:
            tv.kill()
            tv.wait()
        tv.stdout.close()
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_backgrounded_trainvisor_forwards_sigint_and_the_child_dies_of_it(tmp_path):
    """A script's background job starts with SIGINT ignored; the training must still get Ctrl-C."""
    (tmp_path / "child.py").write_text("import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n")
    tv = subprocess.Popen(TRAINVISOR + ["run", "-q", "--run-dir", "r", "--kill-timeout", "20", "--",
                                        sys.executable, "child.py"], cwd=tmp_path, stdout=subprocess.PIPE,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert int(tv.stdout.readline()) > 0  # the child runs
        started = time.monotonic()
        tv.send_signal(signal.SIGINT)
        assert tv.wait(timeout=15) == 130  # the child died of SIGINT, not of a SIGKILL 20 s later
        assert time.monotonic() - started < 5
    finally:
        if tv.poll() is None:
            tv.kill()
            tv.wait()
        tv.stdout.close()
