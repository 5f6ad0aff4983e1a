"""Every signal as an init forwards it (dumb-init's rule, tested here with the project's own
stand-in, tests/signal_child.py): each catchable signal sent to `trainvisor run` reaches the
child, except the two documented as trainvisor's own (SIGCHLD, SIGPIPE); job control stops the
child's group and then trainvisor, and SIGCONT continues both."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from trainvisor.supervisor.signals import FORWARDED_SIGNALS, JOB_CONTROL_SIGNALS, OWN_SIGNALS
from trainvisor.supervisor.syncsignals import SYNCHRONOUS_SIGNALS

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
    documented = set(FORWARDED_SIGNALS) | SYNCHRONOUS_SIGNALS | OWN_SIGNALS | JOB_CONTROL_SIGNALS
    assert documented | {signal.SIGKILL, signal.SIGSTOP} == set(range(1, 32))
    assert OWN_SIGNALS == {signal.SIGCHLD, signal.SIGPIPE}


def test_each_signal_sent_to_trainvisor_reaches_the_child_in_turn(tmp_path):
    tv, child = _start(tmp_path)
    try:
        for sig in EVERY:
            if sig == signal.SIGPIPE:
                continue  # trainvisor's own: it is about its own stdout (signals.py)
            tv.send_signal(sig)
            assert tv.stdout.readline() == f"{sig}\n".encode(), signal.Signals(sig).name
        assert tv.poll() is None  # none of them ended trainvisor (SIGTERM and SIGINT came once each)
        tv.send_signal(signal.SIGTERM)  # the second: the child, which ignores it, is killed now
        assert tv.stdout.readline() == f"{signal.SIGTERM}\n".encode()
        assert tv.wait(timeout=15) == 128 + signal.SIGKILL
    finally:
        _end(tv, child)


def test_sigpipe_from_outside_is_not_forwarded_and_does_not_end_trainvisor(tmp_path):
    tv, child = _start(tmp_path)
    try:
        tv.send_signal(signal.SIGPIPE)
        tv.send_signal(signal.SIGUSR1)  # a probe: the next line the child prints is its
        assert tv.stdout.readline() == f"{signal.SIGUSR1}\n".encode()
        assert tv.poll() is None
    finally:
        _end(tv, child)


@pytest.mark.parametrize("sig", sorted(JOB_CONTROL_SIGNALS), ids=lambda s: signal.Signals(s).name)
def test_job_control_stops_the_child_then_trainvisor_and_sigcont_continues_both(tmp_path, sig):
    tv, child = _start(tmp_path)
    try:
        tv.send_signal(sig)
        os.waitpid(tv.pid, os.WUNTRACED)  # returns once trainvisor has stopped
        assert _state(tv.pid) == psutil.STATUS_STOPPED
        assert _state(child) == psutil.STATUS_STOPPED
        tv.send_signal(signal.SIGCONT)
        # The child ran its handler for `sig` once continued, then got the forwarded SIGCONT.
        assert sorted([tv.stdout.readline(), tv.stdout.readline()]) == sorted(
            [f"{sig}\n".encode(), f"{signal.SIGCONT}\n".encode()])
        assert _state(tv.pid) != psutil.STATUS_STOPPED and _state(child) != psutil.STATUS_STOPPED
    finally:
        _end(tv, child)
