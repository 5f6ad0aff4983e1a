"""trainvisor's own logging never writes into the training's stderr: other libraries'
warnings (watchdog, botocore, urllib3) go to the run log, not to logging's last-resort
stderr handler, because stderr carries the child's bytes unchanged. Run in a fresh
interpreter: pytest's own handlers on the root logger would hide the last-resort path."""
from __future__ import annotations

import subprocess
import sys

from trainvisor.run.logsetup import RUN_LOG_NAME

SCRIPT = """
import logging, sys
from pathlib import Path
from trainvisor.run.logsetup import RunLogging
run_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else None
logs = RunLogging.start(run_dir, quiet=run_dir is None)
try:
    logging.getLogger("urllib3.connectionpool").warning("Retrying after connection broken: %s", "reset")
    logging.getLogger("botocore.credentials").info("Found credentials in environment variables.")
    logging.getLogger("watchdog.observers.inotify").error(
        "InotifyEmitter.queue_events() called when the thread is inactive")
    logging.getLogger("trainvisor.upload").warning("upload of %s failed, retrying", "w.caffemodel")
    import warnings
    warnings.warn("Callback with id 1 already exists for watch", RuntimeWarning)
finally:
    logs.close()
logging.getLogger("late.library").warning("after close")
"""


def _script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, timeout=60)


def test_library_warnings_go_to_the_run_log_not_to_stderr(tmp_path):
    out = _script(str(tmp_path))
    assert out.returncode == 0, out.stderr
    # only trainvisor's own warning; after close, logging is back to Python's default
    assert out.stderr == "trainvisor: upload of w.caffemodel failed, retrying\nafter close\n"
    run_log = (tmp_path / RUN_LOG_NAME).read_text()
    assert "urllib3.connectionpool: Retrying after connection broken: reset" in run_log
    assert "trainvisor.upload: upload of w.caffemodel failed, retrying" in run_log
    assert "Found credentials" not in run_log  # below WARNING from libraries
    assert "thread is inactive" not in run_log  # watchdog's benign stop race is dropped
    assert "RuntimeWarning: Callback with id 1 already exists for watch" in run_log  # a library warning, logged


def test_without_a_run_directory_library_warnings_are_silent():
    out = _script()
    assert out.returncode == 0 and out.stderr == "after close\n", out.stderr


FULL_DISK_LAUNCHER = """
import errno, sys
from trainvisor.sinks.registry import register_sink


class FullDisk:
    name = "full"
    inline = True

    def write(self, events):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        pass

    def close(self):
        pass


register_sink("full", FullDisk, inline=True)
from trainvisor.cli import main
main(sys.argv[1:])
"""


def test_a_failing_sink_is_one_line_on_stderr_and_its_traceback_is_in_the_run_log(tmp_path):
    import subprocess
    import sys

    from .conftest import FAKE_CAFFE, FIXTURES, ROOT

    launcher = tmp_path / "launch.py"
    launcher.write_text(FULL_DISK_LAUNCHER)
    proc = subprocess.run([sys.executable, str(launcher), "run", "--sink", "full", "--run-dir", str(tmp_path / "run"),
                           "--year", "2026", "--", sys.executable, str(FAKE_CAFFE),
                           str(FIXTURES / "logs" / "lenet-newyear.log"), "--no-snapshots", "--stdout"],
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr  # the training is not stopped by a failing sink
    ours = [line for line in proc.stderr.splitlines() if "full" in line and line.startswith("trainvisor:")]
    assert ours == ["trainvisor: sink full failed: OSError: [Errno 28] No space left on device "
                    "(traceback in the run log)"]
    assert "Traceback" not in proc.stderr
    run_log = (tmp_path / "run" / "train.log").read_text()
    assert "Traceback (most recent call last)" in run_log and "OSError: [Errno 28] No space left on device" in run_log
