"""`Run.status()`: one frozen snapshot of a run, from any thread: the child's state and pid while
it runs, `stopping` once a stop was asked, `exited` with its code after; the counts agree with the
summary; the uploads count verified sets and the bytes of the files sent."""
from __future__ import annotations

import os
import sys

import psutil

from trainvisor import Run, RunConfig
from trainvisor.config import ParsingConfig, RunDirConfig, UploadConfig, WatchConfig
from trainvisor.status import CHILD_EXITED, CHILD_NOT_STARTED, CHILD_RUNNING, CHILD_STOPPING

from .conftest import FAKE_CAFFE, FIXTURES

LOG = FIXTURES / "logs" / "lenet-newyear.log"


def _config(tmp_path, *args, **sections) -> RunConfig:
    return RunConfig(command=(sys.executable, str(FAKE_CAFFE), str(LOG), *args),
                     parsing=ParsingConfig(year=2026), run=RunDirConfig(dir=str(tmp_path / "run")), **sections)


def test_status_while_running_while_stopping_and_after(tmp_path):
    seen = {}

    def hook(record) -> None:  # on the pipeline thread, while the child runs
        if record.number == 30 and "running" not in seen:
            seen["running"] = run.status()
            seen["alive"] = psutil.pid_exists(seen["running"].pid) and \
                psutil.Process(seen["running"].pid).cmdline()[1:3] == [str(FAKE_CAFFE), str(LOG)]
            run.request_stop("enough")
            seen["stopping"] = run.status()

    run = Run(_config(tmp_path, "--rate", "200", "--on-sigint", "snapshot", "--snapshot-dir", str(tmp_path / "snap")),
              hooks=[hook], stdout_fd=None, stderr_fd=None)
    with run:
        before = run.status()
        run.run_attempt()
        after = run.status()
        summary = run.finish()
    assert (before.child, before.pid, before.exit_code, before.lines) == (CHILD_NOT_STARTED, None, None, 0)
    running = seen["running"]
    assert (running.child, running.attempt, running.exit_code, running.run_id) == (CHILD_RUNNING, 1, None, run.run_id)
    assert seen["alive"] and running.pid != os.getpid()
    assert 0 < running.lines <= 30 and running.metrics > 0 and running.seconds_since_metric is not None
    assert (seen["stopping"].child, seen["stopping"].stop_reason) == (CHILD_STOPPING, "enough")
    assert (after.child, after.pid, after.exit_code) == (CHILD_EXITED, None, summary.returncode)
    assert (after.lines, after.records, after.metrics, after.faults) == \
        (summary.lines, summary.events, summary.metrics, 0)


def test_upload_counts_are_verified_sets_and_file_bytes(tmp_path):
    store = tmp_path / "store"
    config = _config(tmp_path, "--snapshot-dir", str(tmp_path / "snap"),
                     watch=WatchConfig(dirs=(str(tmp_path / "snap"),)), upload=UploadConfig(to=f"file://{store}"))
    with Run(config, stdout_fd=None, stderr_fd=None) as run:
        run.run_attempt()
        summary = run.finish()
        status = run.status()
    files = [p for p in (tmp_path / "snap").rglob("*") if p.is_file()]
    assert len(files) == 8  # 4 sets of .caffemodel + .solverstate
    assert status.checkpoints_complete == summary.checkpoints_complete == 4
    assert status.uploads_verified == summary.uploads.sets_verified == 4
    assert status.uploads_failed == 0
    stored = [p for p in store.rglob("*") if p.is_file()]
    assert sorted(p.name for p in files) == sorted(p.name for p in stored if not p.name.endswith(".manifest.json"))
    # The bytes sent: every object in the store, the files and their sets' manifests.
    assert status.upload_bytes == sum(p.stat().st_size for p in stored) > sum(p.stat().st_size for p in files)


def test_upload_counts_sum_every_destination(tmp_path):
    """Two destinations: the status counts each set once per store it reached, and the bytes sent
    to both; the summary lists each destination."""
    a, b = tmp_path / "a", tmp_path / "b"
    config = _config(tmp_path, "--snapshot-dir", str(tmp_path / "snap"),
                     watch=WatchConfig(dirs=(str(tmp_path / "snap"),)),
                     upload=UploadConfig(to=(f"file://{a}", f"file://{b}")))
    with Run(config, stdout_fd=None, stderr_fd=None) as run:
        run.run_attempt()
        summary = run.finish()
        status = run.status()
    assert [(d.destination, d.sets_verified) for d in summary.destinations] == [(f"file://{a}", 4), (f"file://{b}", 4)]
    assert status.uploads_verified == 8 and status.uploads_failed == 0
    stored = [p for store in (a, b) for p in store.rglob("*") if p.is_file()]
    assert len(stored) == 2 * (8 + 4)  # each store: the 8 files and 4 manifests
    assert status.upload_bytes == sum(p.stat().st_size for p in stored)
