"""`GET /healthz` (run/health.py): 200 while the child runs and prints metrics, 503 with the
reason before it starts, once it is gone, or when no metric came within `health.max_metric_age`;
the body says the child's state, its attempt, the seconds since the last metric and the upload
backlog. A real run (the fake Caffe replaying a real log) is asked while it runs and after."""
from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

from trainvisor import Run, RunConfig
from trainvisor.config import HealthConfig, ParsingConfig, ProcessConfig, RunDirConfig, SinksConfig
from trainvisor.status import health_of
from trainvisor.status import RunStatus

from .conftest import FAKE_CAFFE, FIXTURES
from .test_process_tree import wait_for  # the run log's writer is a thread of its own: its lines are waited for

LOG = FIXTURES / "logs" / "lenet-newyear.log"


def _get(port: int, path: str = "/healthz") -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def _port(run_dir, server: str = "health") -> int:
    """The port a server logged (port 0: a free one); the run log is written by its own thread."""
    said = {"health": "health: serving http://127.0.0.1:", "prometheus": "prometheus sink: serving http://127.0.0.1:"}
    text = wait_for(lambda: said[server] in (run_dir / "train.log").read_text() and (run_dir / "train.log").read_text(),
                    30, f"the run log to name the {server} port")
    return int(text.split(said[server], 1)[1].split("/", 1)[0])


def test_healthz_before_while_and_after_the_child(tmp_path):
    seen = {}

    def hook(record) -> None:  # on the pipeline thread, while the child runs
        # from line 30 on, until the sinks have had a block with a metric (a block's hooks run
        # before its records reach the sinks, and the reader's chunks vary with the load)
        if record.number >= 30 and "running" not in seen:
            answer = _get(_port(tmp_path / "run"))
            if answer[1]["seconds_since_metric"] is not None or record.number >= 100:  # the log has 105 lines
                seen["running"] = answer

    config = RunConfig(command=(sys.executable, str(FAKE_CAFFE), str(LOG), "--rate", "400"),
                       parsing=ParsingConfig(year=2026), run=RunDirConfig(dir=str(tmp_path / "run")),
                       process=ProcessConfig(cwd=str(tmp_path)),  # its snapshots land in the test's folder
                       health=HealthConfig(port=0, max_metric_age=600))
    with Run(config, hooks=[hook], stdout_fd=None, stderr_fd=None) as run:
        port = _port(tmp_path / "run")
        assert _get(port) == (503, {"child": "not-started", "attempt": 1, "pid": None, "seconds_since_metric": None,
                                    "upload_backlog": 0, "uploads_failed": 0, "ok": False,
                                    "reason": "the child has not started"})
        assert _get(port, "/metrics")[0] == 404
        run.run_attempt()
        code, body = _get(port)
        assert (code, body["child"], body["ok"], body["reason"]) == (
            503, "exited", False, "the child has exited (exit code 0)")
        summary = run.finish()
    code, body = seen["running"]
    assert (code, body["child"], body["attempt"], body["ok"]) == (200, "running", 1, True)
    assert body["seconds_since_metric"] is not None and 0 <= body["seconds_since_metric"] < 600
    assert summary.metrics > 0


def _status(**kw) -> RunStatus:
    return RunStatus(**{"run_id": "r", "attempt": 2, "child": "running", **kw})


def test_a_stale_run_is_503_and_the_backlog_counts_sets_handed_over_not_yet_uploaded():
    fresh = _status(seconds_since_metric=5.0, checkpoints_complete=3, uploads_verified=1, uploads_failed=1)
    assert health_of(fresh, max_metric_age=60, since_start=900) == (200, {
        "child": "running", "attempt": 2, "pid": None, "seconds_since_metric": 5.0, "upload_backlog": 1,
        "uploads_failed": 1, "ok": True})
    code, body = health_of(_status(seconds_since_metric=61.0), max_metric_age=60, since_start=900)
    assert (code, body["reason"]) == (503, "no metric for 61s (health.max_metric_age 60s)")
    code, body = health_of(_status(), max_metric_age=60, since_start=75.0)
    assert (code, body["reason"]) == (503, "no metric yet after 75s (health.max_metric_age 60s)")
    assert health_of(_status(), max_metric_age=60, since_start=30.0)[0] == 200
    assert health_of(_status(seconds_since_metric=1e6), max_metric_age=None, since_start=1e6)[0] == 200
    assert health_of(_status(child="stopping"), max_metric_age=None, since_start=0)[0] == 200


def test_sets_skipped_as_superseded_are_no_upload_backlog():
    """`--upload-policy last`: 8 of 10 sets skipped in the queue are done with, not waiting."""
    status = _status(seconds_since_metric=1.0, checkpoints_complete=10, uploads_verified=2, uploads_skipped=8)
    assert health_of(status, max_metric_age=None, since_start=0)[1]["upload_backlog"] == 0


def test_with_the_prometheus_sink_healthz_is_served_on_its_port_beside_metrics(tmp_path):
    seen = {}

    def hook(record) -> None:
        if record.number == 30 and "running" not in seen:
            port = _port(tmp_path / "run", "prometheus")
            seen["running"], seen["port"] = _get(port), port
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
                seen["metrics"] = reply.read().decode()

    config = RunConfig(command=(sys.executable, str(FAKE_CAFFE), str(LOG), "--rate", "400"),
                       parsing=ParsingConfig(year=2026), run=RunDirConfig(dir=str(tmp_path / "run")),
                       process=ProcessConfig(cwd=str(tmp_path)),  # its snapshots land in the test's folder
                       sinks=SinksConfig(use=("prometheus",), options={"prometheus": {"port": 0}}))
    with Run(config, hooks=[hook], stdout_fd=None, stderr_fd=None) as run:
        run.run_attempt()
        after = _get(seen["port"])
        run.finish()
    code, body = seen["running"]
    assert (code, body["child"], body["ok"]) == (200, "running", True)
    assert "trainvisor_lines_total" in seen["metrics"]
    assert after[0] == 503 and after[1]["reason"] == "the child has exited (exit code 0)"
    assert _port(tmp_path / "run") == seen["port"]  # the health line names the sink's port


def test_a_health_port_in_use_is_one_line_and_the_child_never_starts(tmp_path):
    import os
    import socket
    import subprocess

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "trainvisor", "run", "--run-dir", "r", "--health-port", str(port),
                               "--", sys.executable, "-c", "open('started', 'w')"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "LANG": "C.UTF-8"})
    assert done.returncode == 2
    assert done.stderr == f"trainvisor: health: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert not (tmp_path / "started").exists()
