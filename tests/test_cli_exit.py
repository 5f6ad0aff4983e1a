"""`trainvisor` as a process ends without the interpreter's teardown (cli.console_main), yet does
everything an exit must: threads that are not daemons joined, atexit handlers run, output flushed,
the exit status the interpreter would give."""
from __future__ import annotations

import subprocess
import sys

import pytest

# A thread that is no daemon still has work to do (a tenth of a second of it) when the exit is
# asked for: the interpreter would wait for it; an atexit handler prints last; stdout is a pipe,
# so block-buffered.
_SCRIPT = """
import atexit, sys, threading
from trainvisor.cli import _exit_now
def late():
    print("thread done", sum(range(3_000_000)) > 0)
print("buffered", end="")
threading.Thread(target=late).start()
atexit.register(lambda: print("atexit ran"))
_exit_now(eval(sys.argv[1]))
"""


@pytest.mark.parametrize("code, status, stderr", [
    ("None", 0, ""), ("0", 0, ""), ("3", 3, ""), ("-1", 255, ""), ("256 + 4", 4, ""),
    ("'trainvisor: stopped'", 1, "trainvisor: stopped\n"),
])
def test_the_fast_exit_joins_runs_atexit_flushes_and_gives_the_interpreters_status(code, status, stderr):
    done = subprocess.run([sys.executable, "-c", _SCRIPT, code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (status, "bufferedthread done True\natexit ran\n", stderr)
    plain = subprocess.run([sys.executable, "-c", f"import sys; sys.exit({code})"], capture_output=True, text=True,
                           timeout=60)
    assert (plain.returncode, plain.stderr) == (status, stderr)  # what the interpreter itself does


def test_an_executor_left_running_ends_as_at_a_normal_exit():
    """Its idle worker is no daemon: only threading's exit hook (what the interpreter calls first)
    lets it end; joining it without that would wait forever."""
    script = ("from concurrent.futures import ThreadPoolExecutor\n"
              "from trainvisor.cli import _exit_now\n"
              "executor = ThreadPoolExecutor(1)  # kept: a collected executor would stop its worker\n"
              "executor.submit(print, 'task ran')\n"
              "_exit_now(5)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (5, "task ran\n", "")


def test_a_run_through_the_process_entry_keeps_its_log_and_summary(tmp_path):
    """The run log's last line is written by the writer's close at exit, summary.json before it."""
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "trainvisor", "run", "-q", "--run-dir", str(run_dir), "--",
                           sys.executable, "-c", "print('loss: 0.5'); raise SystemExit(7)"],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (7, "loss: 0.5\n", "")
    assert '"exit_code": 7' in (run_dir / "summary.json").read_text()
    last = (run_dir / "train.log").read_text().splitlines()[-1]
    assert "INFO trainvisor: sink jsonl: 1 records written, 0 dropped, 0 failed, " in last, last
