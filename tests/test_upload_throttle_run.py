"""`trainvisor run` with the issue-24 upload controls, end to end: `--upload-policy last` on a slow
store skips the snapshots a newer one superseded before their upload began (journal, summary,
run log) and always uploads the newest; `--upload-rate-limit` holds the rate and the summary
says what the uploads cost in time."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import boto3

from tests.faultproxy import FaultProxy
from tests.test_upload_run import TRAINVISOR, fake_caffe_run
from trainvisor.run.summaryfile import read_summary
from trainvisor.uploaders.journal import SKIPPED, VERIFIED, Journal

from .conftest import s3_env

MiB = 1 << 20


def test_upload_policy_last_on_a_slow_store_uploads_the_started_sets_and_the_newest(tmp_path, moto_endpoint):
    boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                 region_name="us-east-1").create_bucket(Bucket="ckpt")
    with FaultProxy(moto_endpoint) as proxy:
        proxy.inject("PUT", r"\.(caffemodel|solverstate)$", 1.5, times=100)  # a slow link for the weights
        proc = fake_caffe_run(tmp_path, "last", ["--upload-to", "s3://ckpt/p", "--upload-policy", "last",
                                                 "--summary"], env=s3_env(proxy.url, tmp_path), size=64 << 10)
        sent = {p.rsplit("/", 1)[1] for method, p, _q, status in proxy.requests
                if method == "PUT" and status == 200 and p.endswith(".caffemodel")}
    err = proc.stderr.decode()
    assert proc.returncode == 0, err[-2000:]
    run_dir = tmp_path / "last" / "run"
    uploads = read_summary(run_dir).uploads
    sets = {f"lenet_iter_{i}": f"p/r1/lenet_iter_{i}.manifest.json" for i in range(100, 1001, 100)}
    assert uploads.sets_verified + uploads.sets_skipped == 10 and uploads.sets_pending == uploads.sets_failed == 0
    assert uploads.sets_skipped >= 5  # two workers on a 3 s per set link: the rest was superseded in the queue
    assert sets["lenet_iter_1000"] not in uploads.skipped  # the newest, always uploaded
    j = Journal(str(run_dir))
    try:
        states = {name: j.set_state(key) for name, key in sets.items()}
    finally:
        j.close()
    assert states["lenet_iter_1000"] == VERIFIED
    assert sorted(k for k, s in states.items() if s == SKIPPED) == sorted(
        name for name, key in sets.items() if key in uploads.skipped)
    # Only the sets that started sent their weights; a skipped one never sent a byte.
    assert sent == {f"{name}.caffemodel" for name, s in states.items() if s == VERIFIED}
    assert f"{uploads.sets_verified} sets verified, 0 pending, 0 failed, {uploads.sets_skipped} skipped (superseded)" \
        in err
    log = (run_dir / "train.log").read_text()
    assert f"{uploads.sets_skipped} checkpoint set(s) skipped, superseded before their upload began" in log


CHILD = """
import os, sys
os.makedirs("ckpt", exist_ok=True)
with open("ckpt/model_step_1.pt.tmp", "wb") as fh:
    fh.write(os.urandom(3 << 20))
os.replace("ckpt/model_step_1.pt.tmp", "ckpt/model_step_1.pt")
print("saved ckpt/model_step_1.pt", flush=True)
"""


def test_a_rate_limited_run_reports_its_upload_rate_and_its_wait(tmp_path):
    (tmp_path / "train.py").write_text(CHILD)
    proc = subprocess.run(TRAINVISOR + ["run", "--summary", "--run-dir", "r", "--watch", "ckpt",
                                        "--upload-to", f"file://{tmp_path / 'store'}", "--upload-rate-limit", "6MiB/s",
                                        "--", sys.executable, "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    uploads = read_summary(tmp_path / "r").uploads
    assert uploads.sets_verified == 1
    assert uploads.bytes_sent > 3 * MiB  # the weights and their manifest
    limit, burst = 6 * MiB, 0.1  # the bucket fills up to 0.1 s of tokens while the training runs
    assert uploads.bytes_sent <= limit * (uploads.seconds + burst) * 1.02
    assert uploads.rate <= limit * 1.3  # 0.5 s of bytes: the 0.1 s burst is a fifth of it
    assert 0.9 * (3 * MiB / limit - burst) <= uploads.limiter_wait <= uploads.seconds * 1.05
    line = next(s for s in proc.stderr.splitlines() if "waited on the rate limit" in s)
    assert line.strip().startswith("3.1 MB sent in ") and "MB/s)" in line


def test_a_rate_that_is_not_one_is_a_one_line_error_naming_the_flag(tmp_path):
    run = subprocess.run(TRAINVISOR + ["run", "--upload-rate-limit", "fast", "--", "true"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stderr) == (2, "trainvisor: --upload-rate-limit: upload.rate_limit: must be a rate "
                                               "such as 50MB/s, 800KiB/s or 1.5GB/s (0: unlimited) (got 'fast')\n")
    (tmp_path / "c.yaml").write_text("upload:\n  rate_limit: 5 MB a second\n")
    run = subprocess.run(TRAINVISOR + ["run", "--config", "c.yaml", "--", "true"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.startswith("trainvisor: c.yaml:2: upload.rate_limit: must be a rate")
    assert run.stderr.count("\n") == 1


def test_trainvisor_upload_holds_its_rate_limit_and_says_how_long_it_waited(tmp_path):
    (tmp_path / "w.pt").write_bytes(os.urandom(2 * MiB))
    argv = TRAINVISOR + ["upload", "w.pt", "--to", f"file://{tmp_path / 'dest'}", "--rate-limit", "4MiB/s"]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "dest" / "w.pt").read_bytes() == (tmp_path / "w.pt").read_bytes()
    said = proc.stderr.strip().splitlines()[-1]  # uploaded 1 file(s), 2.1 MB, in 0.5 s; 0.4 s waited on --rate-limit
    seconds, waited = (float(x) for x in re.findall(r"([\d.]+) s\b", said))
    assert said.startswith("uploaded 1 file(s), 2.1 MB, in ") and said.endswith(" s waited on --rate-limit")
    assert seconds >= 0.95 * (0.5 - 0.1) and 0.9 * (0.5 - 0.1) <= waited <= seconds + 0.05
