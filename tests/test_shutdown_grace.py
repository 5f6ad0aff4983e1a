"""A preempted training container: SIGTERM to trainvisor (as PID 1 of its own PID namespace when
the machine allows), the child's exit checkpoint uploaded and verified, the exit status the
child's (143), and the whole sequence within `--grace`, read from the run log's timestamps;
with a store too slow for the budget, what was given up is listed and the exit still comes in
time; a second SIGTERM skips to the end."""
from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import s3_env
from tests.faultproxy import FaultProxy, HoldReply

CHILD = [sys.executable, str(Path(__file__).with_name("exit_checkpoint_child.py"))]
TRAINVISOR = [sys.executable, "-m", "trainvisor", "run"]
GRACE = 8.0
# What the exit may come after the grace: trainvisor's own start and exit on a loaded machine.
MARGIN = 3.0
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]


def _namespaces_refused() -> str:
    if os.geteuid() != 0:
        return "not root: a new PID namespace needs CAP_SYS_ADMIN"
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return "unshare or nsenter (util-linux) not installed"
    probe = subprocess.run(UNSHARE + ["true"], capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"unshare refused here: {probe.stderr.strip()}"


def _log_times(run_dir: Path) -> list[tuple[dt.datetime, str]]:
    out = []
    for line in (run_dir / "train.log").read_text().splitlines():
        try:
            out.append((dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f"), line[24:]))
        except ValueError:
            continue  # a continuation line (a traceback's)
    return out


def _shutdown_seconds(run_dir: Path) -> float:
    """From the line that says the signal reached the child to the run log's last line."""
    lines = _log_times(run_dir)
    start = next(t for t, text in lines if "SIGTERM sent to the child" in text)
    return (lines[-1][0] - start).total_seconds()


def _wait_ready(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline()
    assert line.startswith(b"ready"), line


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        for p in psutil.Process(proc.pid).children(recursive=True) + [psutil.Process(proc.pid)]:
            p.kill()
        proc.wait(30)
    proc.stdout.close()


def test_sigterm_to_pid_1_uploads_the_exit_checkpoint_and_exits_143_within_the_grace(tmp_path):
    refused = _namespaces_refused()
    if refused:
        pytest.skip(refused)
    store = tmp_path / "store"
    argv = UNSHARE + TRAINVISOR + ["-q", "--no-summary", "--run-dir", "r", "--grace", str(GRACE), "--watch", "ckpt",
                                   "--upload-to", store.as_uri(), "--", *CHILD]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE)
    try:
        _wait_ready(proc)
        (tv,) = psutil.Process(proc.pid).children()  # trainvisor: PID 1 in the new namespace
        started = time.monotonic()
        subprocess.run(["nsenter", "--target", str(tv.pid), "--pid", "--", "kill", "-TERM", "1"], check=True)
        assert proc.wait(timeout=GRACE + MARGIN) == 143
        assert time.monotonic() - started <= GRACE + MARGIN
    finally:
        _stop(proc)
    run_dir = tmp_path / "r"
    assert (run_dir / "train.log").read_text().split(" ")[2] == "1"  # its log's pid: PID 1 of the namespace
    assert _shutdown_seconds(run_dir) <= GRACE
    (uploaded,) = store.glob("*/model_final.pt")
    assert uploaded.read_bytes() == (tmp_path / "ckpt" / "model_final.pt").read_bytes()
    db = sqlite3.connect(run_dir / "uploads.sqlite")
    try:
        states = dict(db.execute("SELECT key, state FROM files").fetchall())
    finally:
        db.close()
    assert states[f"{uploaded.parent.name}/model_final.pt"] == "verified"
    text = (run_dir / "train.log").read_text()
    assert "1 of 1 checkpoint sets verified" in text and "shutdown after SIGTERM: in order" in text
    assert "shutdown: " not in text  # nothing was given up


def test_a_store_too_slow_for_the_grace_is_abandoned_listed_and_the_exit_comes_in_time(moto_endpoint, tmp_path):
    import boto3

    boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                 region_name="us-east-1").create_bucket(Bucket="ckpt")
    with FaultProxy(moto_endpoint) as proxy:
        proxy.inject("PUT", r"model_final\.pt$", HoldReply(120), times=10)  # the store takes it, never answers in time
        argv = TRAINVISOR + ["--summary", "--run-dir", "r", "--grace", str(GRACE), "--watch", "ckpt",
                             "--upload-to", "s3://ckpt/backup", "--", *CHILD]
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=s3_env(proxy.url, tmp_path, COLUMNS="100", LANG="C.UTF-8", TZ="UTC"))
        try:
            _wait_ready(proc)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=GRACE + MARGIN) == 143
            assert time.monotonic() - started <= GRACE + MARGIN
            err = proc.stderr.read().decode()
        finally:
            _stop(proc)
            proc.stderr.close()
    assert _shutdown_seconds(tmp_path / "r") <= GRACE
    abandoned = [line for line in err.splitlines() if line.startswith("  ABANDONED")]
    assert len(abandoned) == 1 and "1 checkpoint set(s) not uploaded within the grace (out of time; 2 file(s) pending)" in abandoned[0], err
    assert "sets verified, 1 pending" in err


def test_a_second_sigterm_kills_a_training_that_ignores_the_first_and_says_so(tmp_path):
    argv = TRAINVISOR + ["--summary", "--run-dir", "r", "--grace", "60", "--", *CHILD, "ignore"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "COLUMNS": "100", "LANG": "C.UTF-8", "TZ": "UTC"})
    try:
        _wait_ready(proc)
        proc.send_signal(signal.SIGTERM)
        while b"SIGTERM ignored" not in proc.stdout.readline():
            pass
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 128 + signal.SIGKILL  # not the 36 s of the child's share
        assert time.monotonic() - started < 10
        err = proc.stderr.read().decode()
    finally:
        _stop(proc)
        proc.stderr.close()
    assert "  ABANDONED      the child's wait: it was killed (SIGKILL) on a second signal" in err, err
    text = (tmp_path / "r" / "train.log").read_text()
    assert "shutdown after SIGTERM: skipped to the end (a second signal)" in text
