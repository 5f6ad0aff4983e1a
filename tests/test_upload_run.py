"""`trainvisor run --watch DIR --upload-to URL`: every checkpoint of a fake-Caffe run
reaches the destination, verified, with its manifest, and the output is unchanged."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FAKE_CAFFE, s3_env

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
ITERS = 1000  # fake-caffe --generate 1000 snapshots every 100 iterations: 10 checkpoints


LARGE = 110_000_000  # the weights of every 5th snapshot: two 100 MB+ checkpoints per run


def fake_caffe_run(tmp_path: Path, tag: str, extra: list[str], *, env=None, size: int,
                   large: int = 0) -> subprocess.CompletedProcess:
    work = tmp_path / tag
    work.mkdir()
    sizes = ["--large-size", str(large), "--large-every", "5"] if large else []
    return subprocess.run(
        TRAINVISOR + ["run", "--run-dir", str(work / "run"), "--run-id", "r1", "--watch", str(work / "snap"), *extra,
                      "--", sys.executable, str(FAKE_CAFFE), "train", "--generate", str(ITERS),
                      "--snapshot-dir", str(work / "snap"), "--snapshot-size", str(size), *sizes],
        capture_output=True, cwd=work, timeout=300, env=env)


def expected_files(work: Path) -> dict[str, bytes]:
    snap = work / "snap"
    return {str(p.relative_to(snap)): p.read_bytes() for p in sorted(snap.rglob("*")) if p.is_file()}


def test_every_checkpoint_is_uploaded_to_a_local_store_with_manifests(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    plain = fake_caffe_run(tmp_path, "plain", [], size=1 << 20)
    up = fake_caffe_run(tmp_path, "up", ["--upload-to", f"file://{dest}"], size=1 << 20)
    assert plain.returncode == 0 and up.returncode == 0, up.stderr[-2000:]
    assert up.stderr == plain.stderr and up.stdout == plain.stdout  # the training's output is untouched
    files = expected_files(tmp_path / "up")
    assert len(files) == 20  # 10 x (.caffemodel + .solverstate)
    for rel, data in files.items():
        assert (dest / "r1" / rel).read_bytes() == data
    manifests = sorted((dest / "r1").rglob("*.manifest.json"))
    assert len(manifests) == 10
    m = json.loads(manifests[0].read_text())
    assert m["run_id"] == "r1" and len(m["files"]) == 2
    assert {f["size"] for f in m["files"]} == {1 << 20}


def test_every_checkpoint_is_uploaded_to_s3_with_manifests(tmp_path, moto_endpoint):
    import boto3

    env = s3_env(moto_endpoint, tmp_path)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    s3.create_bucket(Bucket="ckpt")
    plain = fake_caffe_run(tmp_path, "plain", [], size=1 << 10)
    up = fake_caffe_run(tmp_path, "up", ["--upload-to", "s3://ckpt/backups"], env=env, size=9 << 20, large=LARGE)
    assert up.returncode == 0, up.stderr[-2000:]
    assert up.stderr == plain.stderr and up.stdout == plain.stdout
    files = expected_files(tmp_path / "up")
    assert len(files) == 20 and sum(len(d) == LARGE for d in files.values()) == 2
    for rel, data in files.items():
        assert s3.get_object(Bucket="ckpt", Key=f"backups/r1/{rel}")["Body"].read() == data
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="ckpt", Prefix="backups/r1/")["Contents"]]
    assert sum(k.endswith(".manifest.json") for k in keys) == 10
    manifest = json.loads(s3.get_object(Bucket="ckpt", Key="backups/r1/lenet_iter_500.manifest.json")["Body"].read())
    assert manifest["iteration"] == 500
    assert {f["relpath"]: f["size"] for f in manifest["files"]} == {
        rel: len(data) for rel, data in files.items() if "lenet_iter_500." in rel}


def test_a_missing_bucket_stops_the_run_before_the_training_starts(tmp_path, moto_endpoint):
    secret = "s3cr3t-Value-8c1f"
    env = s3_env(moto_endpoint, tmp_path, AWS_ACCESS_KEY_ID="AKIDTRAINVISORTEST", AWS_SECRET_ACCESS_KEY=secret)
    up = fake_caffe_run(tmp_path, "up", ["--upload-to", "s3://nobucket/x"], env=env, size=1024)
    err = up.stderr.decode()
    assert up.returncode == 3
    assert err.count("\n") == 1 and err.startswith("trainvisor: ") and "nobucket" in err
    run_log = (tmp_path / "up" / "run" / "train.log").read_text()
    for text in (err, run_log):  # credentials appear in neither the error nor the run log
        assert secret not in text and "AKIDTRAINVISORTEST" not in text
    assert not (tmp_path / "up" / "snap").exists()  # the training never started


@pytest.mark.parametrize("observer", [[], ["--poll"]], ids=["inotify", "polling"])
def test_slowly_written_checkpoints_are_uploaded_once_and_only_when_complete(tmp_path, observer):
    """fake-caffe writes each 3 MiB snapshot file 1 MiB every 100 ms: each is uploaded once,
    in its final state (an upload started early would show as a second attempt or a
    smaller size in the journal, and a torn copy in the store)."""
    import sqlite3

    dest = tmp_path / "dest"
    work = tmp_path / "slow"
    work.mkdir()
    run = subprocess.run(
        TRAINVISOR + ["run", "--run-dir", str(work / "run"), "--run-id", "r1", "--watch", str(work / "snap"),
                      *observer, "--upload-to", f"file://{dest}",
                      "--", sys.executable, str(FAKE_CAFFE), "train", "--generate", "200",
                      "--snapshot-dir", str(work / "snap"), "--snapshot-size", str(3 << 20), "--write-delay", "0.1"],
        capture_output=True, cwd=work, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    files = expected_files(work)
    assert len(files) == 20  # a snapshot every 20 iterations: weights + solver state each
    for rel, data in files.items():
        assert (dest / "r1" / rel).read_bytes() == data
    db = sqlite3.connect(work / "run" / "uploads.sqlite")
    rows = dict(((key, (size, state, attempts)) for key, size, state, attempts in
                 db.execute("SELECT key, size, state, attempts FROM files WHERE key NOT LIKE '%.manifest.json'")))
    db.close()
    assert rows == {f"r1/{rel}": (3 << 20, "verified", 1) for rel in files}


def test_every_checkpoint_is_uploaded_to_kodo_with_manifests(tmp_path, kodo):
    plain = fake_caffe_run(tmp_path, "plain", [], size=1 << 10)
    up = fake_caffe_run(tmp_path, "up", ["--upload-to", "kodo://ckpt/backups"], size=1 << 20, large=LARGE)
    assert up.returncode == 0, up.stderr[-2000:]
    assert up.stderr == plain.stderr and up.stdout == plain.stdout
    files = expected_files(tmp_path / "up")
    assert len(files) == 20 and sum(len(d) == LARGE for d in files.values()) == 2
    for rel, data in files.items():
        assert kodo.read_object("ckpt", f"backups/r1/{rel}") == data
        assert kodo.object_writes("ckpt", f"backups/r1/{rel}") == 1
    manifest = json.loads(kodo.read_object("ckpt", "backups/r1/lenet_iter_1000.manifest.json"))
    assert manifest["iteration"] == 1000
    assert {f["relpath"]: f["size"] for f in manifest["files"]} == {
        rel: len(data) for rel, data in files.items() if "lenet_iter_1000." in rel}
    import qiniu

    weights = tmp_path / "up" / "snap" / next(r for r in files if r.endswith("lenet_iter_1000.caffemodel"))
    assert {f["checksum"] for f in manifest["files"] if f["relpath"].endswith(".caffemodel")} == {
        f"qetag:{qiniu.etag(str(weights))}"}
