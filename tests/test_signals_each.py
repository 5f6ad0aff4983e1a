"""Every signal as an init forwards it (dumb-init's rule, tested here with the project's own
stand-in, tests/signal_child.py): each catchable signal sent to `trainvisor run` reaches the
child, except SIGCHLD, documented as trainvisor's own (and a SIGPIPE trainvisor's own write
raises); job control stops the child's group and then trainvisor, and SIGCONT continues both."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from trainvisor.supervisor.signals import FORWARDED_SIGNALS, JOB_CONTROL_SIGNALS, OWN_SIGNALS
from trainvisor.supervisor.syncsignals import RELAYED_SIGNALS

CHILD = str(Path(__file__).with_name("signal_child.py"))
TRAINVISOR = [sys.executable, "-m", "trainvisor", "run", "-q", "--no-summary"]
# What dumb-init's own test sends: 1..31 but the uncatchable, SIGCHLD and job control.
EVERY = [s for s in range(1, 32) if s not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD)
         and s not in JOB_CONTROL_SIGNALS]


def _start(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    tv = subprocess.Popen(TRAINVISOR + ["--run-dir", str(tmp_path / "r"), "--kill-timeout", "20", "--",
                                        sys.executable, CHILD], stdout=subprocess.PIPE, cwd=tmp_path)
    line = tv.stdout.readline().split()
    assert line and line[0] == b"ready", line
    return tv, int(line[1])


def _end(tv: subprocess.Popen, child: int) -> None:
    for pid in (tv.pid, child):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    tv.wait(timeout=30)
    tv.stdout.close()


def _state(pid: int) -> str:
    return psutil.Process(pid).status()


def test_every_catchable_signal_is_forwarded_or_documented_as_trainvisors():
    documented = set(FORWARDED_SIGNALS) | RELAYED_SIGNALS | OWN_SIGNALS | JOB_CONTROL_SIGNALS
    assert documented | {signal.SIGKILL, signal.SIGSTOP} == set(range(1, 32))
    assert OWN_SIGNALS == {signal.SIGCHLD}


def test_each_signal_sent_to_trainvisor_reaches_the_child_in_turn(tmp_path):
    tv, child = _start(tmp_path)
    try:
        for sig in EVERY:
            tv.send_signal(sig)
            assert tv.stdout.readline() == f"{sig}\n".encode(), signal.Signals(sig).name
        assert tv.poll() is None  # none of them ended trainvisor (SIGTERM and SIGINT came once each)
        tv.send_signal(signal.SIGTERM)  # the second: the child, which ignores it, is killed now
        assert tv.stdout.readline() == f"{signal.SIGTERM}\n".encode()
        assert tv.wait(timeout=15) == 128 + signal.SIGKILL
    finally:
        _end(tv, child)


WRITER = """
import sys
print("loss=1.0", flush=True)
sys.stdin.readline()  # until the test has closed trainvisor's stdout
for i in range(2, 2001):
    print(f"loss={1.0 / i:.6f}", flush=True)
"""


def test_a_closed_stdout_raises_sigpipe_in_trainvisor_only_the_training_goes_on_and_is_parsed(tmp_path):
    """The SIGPIPE trainvisor's own write raises is not the training's: it is not forwarded."""
    (tmp_path / "writer.py").write_text(WRITER)
    tv = subprocess.Popen(TRAINVISOR + ["--run-dir", "r", "--parser", "generic", "--", sys.executable, "writer.py"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        assert tv.stdout.readline() == b"loss=1.0\n"
        tv.stdout.close()  # the next write trainvisor makes raises SIGPIPE (EPIPE)
        tv.stdin.write(b"go\n")
        tv.stdin.close()
        assert tv.wait(timeout=60) == 0  # the child's status: not killed by a forwarded SIGPIPE
        assert tv.stderr.read() == b""  # -q: said in the run log only
    finally:
        if tv.poll() is None:
            tv.kill()
            tv.wait()
        tv.stderr.close()
    log = (tmp_path / "r" / "train.log").read_text()
    assert log.count("cannot pass stdout through") == 1 and "still parsing it" in log
    records = (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
    assert len(records) == 2000  # every line parsed after the pass-through stopped


@pytest.mark.parametrize("sig", sorted(JOB_CONTROL_SIGNALS), ids=lambda s: signal.Signals(s).name)
def test_job_control_stops_the_child_then_trainvisor_and_sigcont_continues_both(tmp_path, sig):
    tv, child = _start(tmp_path)
    try:
        tv.send_signal(sig)
        os.waitpid(tv.pid, os.WUNTRACED)  # returns once trainvisor has stopped
        assert _state(tv.pid) == psutil.STATUS_STOPPED
        assert _state(child) == psutil.STATUS_STOPPED
        tv.send_signal(signal.SIGCONT)
        # The child's group got SIGSTOP in place of `sig` (dumb-init's setsid rule: a forwarded TSTP's
        # handler would run only after the SIGCONT), then the forwarded SIGCONT: its one line.
        assert tv.stdout.readline() == f"{signal.SIGCONT}\n".encode()
        assert _state(tv.pid) != psutil.STATUS_STOPPED and _state(child) != psutil.STATUS_STOPPED
    finally:
        _end(tv, child)
