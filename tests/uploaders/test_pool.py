"""DaemonThreadPool: the executor of uploads, whose workers never hold the interpreter's exit."""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from trainvisor.uploaders.pool import DaemonThreadPool


def test_results_errors_and_at_most_n_workers_at_once():
    gate, running, peak, changed = threading.Event(), [0], [0], threading.Condition()

    def task(i: int) -> int:
        with changed:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            changed.notify_all()
        gate.wait(5)
        with changed:
            running[0] -= 1
        if i == 3:
            raise ValueError("three")
        return i * 10

    with DaemonThreadPool(2, thread_name_prefix="t-pool") as pool:
        futures = [pool.submit(task, i) for i in range(6)]
        with changed:  # both workers busy, the rest queued
            assert changed.wait_for(lambda: running[0] >= 2, 5)
        # Workers start only in submit: with every task submitted, a third would exist by now.
        assert len([t for t in threading.enumerate() if t.name.startswith("t-pool")]) == 2
        gate.set()
        results = [f.exception() or f.result() for f in futures]
    assert results[:3] == [0, 10, 20] and str(results[3]) == "three" and results[4:] == [40, 50]
    assert peak[0] == 2
    assert not [t for t in threading.enumerate() if t.name.startswith("t-pool")]  # joined by shutdown


def test_shutdown_cancels_queued_tasks_and_refuses_new_ones():
    gate, started = threading.Event(), threading.Event()
    pool = DaemonThreadPool(1)
    first = pool.submit(lambda: started.set() or gate.wait(5))
    assert started.wait(5)
    queued = pool.submit(lambda: "never")
    pool.shutdown(wait=False, cancel_futures=True)
    assert queued.cancelled()
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)
    gate.set()
    assert first.result(5) is True
    pool.shutdown(wait=True)


def test_a_task_still_running_does_not_hold_the_interpreter_exit():
    code = ("import time\nfrom trainvisor.uploaders.pool import DaemonThreadPool\n"
            "DaemonThreadPool(1).submit(time.sleep, 60)\nprint('bye')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0 and done.stdout == "bye\n"
