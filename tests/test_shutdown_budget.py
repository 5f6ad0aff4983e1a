"""The grace budget's arithmetic (run/shutdown.py) on an injected clock, the fault signals' relay
(a real fault still kills trainvisor; one sent from outside with no child acts as it always did),
and `--term-signal SIGINT` with the fake Caffe, which snapshots on SIGINT: the snapshot a SIGTERM
to trainvisor makes is uploaded."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from trainvisor.run.shutdown import Shutdown

from .conftest import FAKE_CAFFE


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_each_step_ends_by_its_share_of_the_grace_counted_from_the_first_signal():
    clock = Clock()
    s = Shutdown(110.0, clock=clock)
    assert not s.begun and s.left(0.6) == float("inf") and s.child_kill_timeout(30.0) == 30.0
    assert s.child_kill_timeout(600.0) == pytest.approx(66.0)
    s.begin(signal.SIGUSR1)  # not a shutdown signal
    assert not s.begun
    s.begin(signal.SIGTERM)
    clock.now += 50.0
    s.begin(signal.SIGINT)  # one of each is not "a second": the budget still counts from the first
    assert (s.left(0.6), s.left(0.7), s.left(0.8)) == pytest.approx((16.0, 27.0, 38.0))
    assert s.left() == pytest.approx(110.0 - 2.0 - 50.0)  # the uploads': the end less the exit margin
    assert not s.skipped and s.describe() == "shutdown after SIGTERM: in order, 50.0s of the 110s grace"
    s.begin(signal.SIGTERM)
    assert s.skipped and s.left() == 0.0 and s.left(0.6) == 0.0
    assert s.describe() == "shutdown after SIGTERM: skipped to the end (a second signal), 50.0s of the 110s grace"


def test_a_short_grace_keeps_a_proportional_exit_margin_and_abandoned_steps_are_kept_in_order():
    clock = Clock()
    s = Shutdown(10.0, clock=clock)
    s.begin(signal.SIGHUP)
    s.begin(signal.SIGHUP)  # SIGHUP again is not a skip (terminals send it more than once)
    assert not s.skipped and s.left() == pytest.approx(9.5)
    s.abandon("first")
    s.abandon("second")
    assert s.abandoned == ("first", "second")


RELAYED = """
import os, signal, sys
from trainvisor.supervisor import syncsignals
assert syncsignals.acquire() is not None
{action}
"""


@pytest.mark.parametrize("action", [
    "import ctypes; ctypes.string_at(0)",  # a real fault in the main thread, the set blocked
    "import ctypes, threading; t = threading.Thread(target=ctypes.string_at, args=(0,)); t.start(); t.join()",
    "os.kill(os.getpid(), signal.SIGSEGV); signal.pause()",  # from outside, no child to give it to
], ids=["fault-main", "fault-thread", "sent-without-child"])
def test_sigsegv_still_kills_with_its_default_action_while_the_relay_runs(action):
    done = subprocess.run([sys.executable, "-c", RELAYED.format(action=action)], capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGSEGV, done.stderr.decode()[-2000:]


def test_term_signal_sigint_makes_caffe_snapshot_and_the_snapshot_is_uploaded(tmp_path):
    store = tmp_path / "store"
    argv = [sys.executable, "-m", "trainvisor", "run", "-q", "--no-summary", "--run-dir", "r",
            "--term-signal", "SIGINT", "--grace", "20", "--watch", "snap", "--upload-to", store.as_uri(), "--",
            sys.executable, str(FAKE_CAFFE), "train", "--generate", "100000", "--rate", "100", "--stdout",
            "--on-sigint", "snapshot", "--snapshot-dir", "snap"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE)
    try:
        for line in proc.stdout:
            if b"Iteration 0," in line:  # training: past its set-up
                break
        proc.send_signal(signal.SIGTERM)
        rest = proc.stdout.read()
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    snaps = sorted(p.name for p in (tmp_path / "snap").rglob("*") if p.is_file())
    uploaded = sorted(p.name for p in store.rglob("*") if p.is_file() and not p.name.endswith(".json"))
    assert snaps and uploaded == snaps, (snaps, uploaded)
    assert b"Optimization stopped early" in rest  # Caffe's answer to SIGINT: a snapshot, then the end
    assert any(n.endswith(".caffemodel") for n in snaps)
    log = (tmp_path / "r" / "train.log").read_text()
    assert "SIGINT sent to the child" in log and "shutdown after SIGTERM: in order" in log
    assert code == 0 or code == 128 + signal.SIGINT, code


def test_a_shutdown_caps_the_threaded_sinks_close_timeout_before_or_after_it_started():
    from trainvisor.sinks.threaded import CloseDeadline

    clock = Clock()
    d = CloseDeadline(5.0, clock=clock)
    d.cap(8.0)  # later than its own bound: no change
    d.cap(2.0)
    assert d.remaining() == 2.0 and d.timeout == 2.0
    clock.now += 1.5
    d.cap(0.25)  # counting already: the end comes sooner, never later
    assert d.remaining() == 0.25
    d.cap(-3.0)
    assert d.remaining() == 0.0
