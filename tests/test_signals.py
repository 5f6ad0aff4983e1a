"""Signals as a user expects them: SIGQUIT forwarded, a parent-death signal when
the supervising process is SIGKILLed, and a forwarded SIGINT that reaches the
child even when the supervising process was started with SIGINT ignored.
"""
from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from trainvisor import Supervisor
from trainvisor.errors import ConfigError
from trainvisor.supervisor.signals import child_setup

from .test_process_tree import PY, TREE_CHILD, drivers, wait_for  # noqa: F401  (drivers is a fixture)


def _ready_pid(d) -> int:
    ready = d / "ready"
    return int(wait_for(lambda: ready.exists() and ready.read_text(), 10, "the child to be ready"))


@pytest.mark.parametrize("sig, code", [(signal.SIGQUIT, 7), (signal.SIGWINCH, 8)], ids=["QUIT", "WINCH"])
def test_sigquit_and_sigwinch_reach_the_child(drivers, tmp_path, sig, code):
    proc = drivers.start(["--", *TREE_CHILD, "signals", str(tmp_path)])
    _ready_pid(tmp_path)
    proc.send_signal(sig)
    assert proc.wait(timeout=10) == code  # the child's exit code: it got the signal
    assert proc.stdout.read() == f"got {sig.name[3:]}\n".encode()


def test_a_sigkilled_supervisor_sends_the_child_sigterm(drivers, tmp_path):
    proc = drivers.start(["--", *TREE_CHILD, "signals", str(tmp_path)])
    child = psutil.Process(_ready_pid(tmp_path))
    proc.kill()
    proc.wait(timeout=10)
    wait_for((tmp_path / "got-TERM").exists, 5, "the child to get SIGTERM")
    assert psutil.wait_procs([child], timeout=5)[1] == []


def test_with_keep_the_child_outlives_a_sigkilled_supervisor(drivers, tmp_path):
    proc = drivers.start(["--on-supervisor-death", "keep", "--", *TREE_CHILD, "signals", str(tmp_path)])
    child = psutil.Process(_ready_pid(tmp_path))
    proc.kill()
    proc.wait(timeout=10)  # a parent-death signal, were one set, was sent as the supervisor died
    assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    # A probe: pending standard signals are delivered, and Python runs their handlers, lowest
    # number first, so a SIGTERM (15) already sent is handled before SIGWINCH (28) ends the child.
    child.send_signal(signal.SIGWINCH)
    assert psutil.wait_procs([child], timeout=10)[1] == []
    assert not (tmp_path / "got-TERM").exists()


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_supervisor_started_with_sigint_ignored_still_stops_its_child_with_sigint(drivers):
    # As `trainvisor run ... &` in a script: SIGINT (and SIGQUIT) start ignored.
    code = "import time; print('ready', flush=True); time.sleep(30)"
    proc = drivers.start(["--kill-timeout", "20", "--", PY, "-c", code], setup=_ignore_sigint)
    assert proc.stdout.readline() == b"ready\n"
    assert psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130  # the child died of SIGINT, not of the SIGKILL 20 s later
    assert time.monotonic() - t0 < 10
    assert b"KeyboardInterrupt" in proc.stderr.read()


def test_on_supervisor_death_accepts_only_term_or_keep():
    with pytest.raises(ConfigError, match="on_supervisor_death must be one of term, keep, not 'kill'"):
        Supervisor(["true"], on_supervisor_death="kill")
    assert Supervisor(["true"], on_supervisor_death="keep").death_signal is None
    assert Supervisor(["true"]).death_signal == signal.SIGTERM


def test_the_child_starts_with_default_dispositions_even_when_ours_are_ignored(tmp_path):
    # Ignored dispositions survive exec; handled ones do not: the child must not inherit SIG_IGN.
    code = ("import signal; print(' '.join(str(signal.getsignal(s) == signal.SIG_DFL) "
            "for s in (signal.SIGQUIT, signal.SIGTERM)))")
    out = tmp_path / "out"
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGQUIT, signal.SIGTERM)}
    try:
        with open(out, "wb") as f:
            result = Supervisor([PY, "-c", code], stdout_fd=f.fileno(), forward_signals=False).run()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    assert result.exit_code == 0
    assert out.read_bytes() == b"True True\n"
    assert os.environ.get("TRAINVISOR_TREE_TOKEN") is None  # the token goes to the child only


def test_a_child_whose_supervisor_died_before_prctl_gets_the_signal_at_once():
    # The parent-death signal only covers a parent alive when prctl runs: the
    # setup compares getppid() with the supervisor's pid and signals itself.
    setup = child_setup(signal.SIGUSR1)
    middle = os.fork()
    if middle == 0:  # not the supervisor: stands in for a parent that already died
        try:
            child = os.fork()
            if child == 0:
                setup()
                os._exit(0)
            _, status = os.waitpid(child, 0)
            os._exit(100 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(middle, 0)
    assert os.WEXITSTATUS(status) == 100 + signal.SIGUSR1
