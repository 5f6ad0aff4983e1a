"""Several upload destinations at once (issue 24): `upload.to` as a list, `--upload-to` repeated.
Each destination has its own journal file, retries, verification and retention; one that is down
holds back no other; the summary lists each; `trainvisor resume` finishes each from the saved
config. Real stores: moto's S3 server behind the fault proxy, and a file:// directory."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import boto3
import yaml

from tests.faultproxy import FaultProxy
from tests.test_upload_run import TRAINVISOR, fake_caffe_run
from trainvisor.run.summaryfile import read_summary
from trainvisor.uploaders.journal import JOURNAL_FILE, journal_name

from .conftest import s3_env

SETS = [f"lenet_iter_{i}" for i in range(100, 1001, 100)]  # fake-caffe --generate 1000: ten snapshot sets
SNAPSHOT_KEY = r"lenet_iter_\d+\.(caffemodel|solverstate)$"
# A clean environment for what a test prints: no terminal settings of whoever runs the suite.
PLAIN = {"COLUMNS": "100", "LANG": "C.UTF-8", "TERM": "dumb"}


def _bucket(endpoint: str, name: str):
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    s3.create_bucket(Bucket=name)
    return s3


def _set_times(run_dir: Path, url: str) -> dict[str, tuple[str, float]]:
    """Each set's journal state and when it was last changed (time.time()), from the journal
    file of `url` among two destinations."""
    db = sqlite3.connect(run_dir / journal_name(url, several=True))
    try:
        rows = db.execute("SELECT checkpoint, state, updated FROM sets").fetchall()
    finally:
        db.close()
    return {json.loads(cp)["name"]: (state, updated) for cp, state, updated in rows}


def test_config_forms_of_several_destinations(tmp_path):
    """One string stays one string; a list in a file, a YAML list in the environment and a
    repeated flag each give the list; a destination listed twice is a one-line error."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINVISOR")}

    def show(*args: str, **extra: str) -> str:
        proc = subprocess.run(TRAINVISOR + ["config", "show", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60, env={**env, **PLAIN, **extra})
        assert proc.returncode == 0, proc.stderr
        return yaml.safe_load(proc.stdout)["upload"]["to"]

    assert show("--upload-to", "s3://b/p") == "s3://b/p"
    assert show("--upload-to", "s3://b/p", "--upload-to", "file:///srv/ckpt") == ["s3://b/p", "file:///srv/ckpt"]
    assert show(TRAINVISOR__UPLOAD__TO="[s3://b/p, file:///srv/ckpt]") == ["s3://b/p", "file:///srv/ckpt"]
    (tmp_path / "c.yaml").write_text("upload:\n  to:\n    - s3://k:secret@b/p\n    - file:///srv/ckpt\n")
    assert show("--config", "c.yaml") == ["s3://k:***@b/p", "file:///srv/ckpt"]
    (tmp_path / "old.yaml").write_text("upload:\n  to: s3://b/p\n")  # an older run directory's config.yaml
    assert show("--config", "old.yaml") == "s3://b/p"
    twice = subprocess.run(TRAINVISOR + ["run", "--upload-to", "s3://k:secret@b/p", "--upload-to",
                                         "s3://k:secret@b/p/", "--", "true"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60, env={**env, **PLAIN})
    assert (twice.returncode, twice.stderr) == (
        2, "trainvisor: --upload-to: upload.to: lists s3://k:***@b/p/ twice\n")


def test_a_destination_down_for_30_s_holds_back_no_other_and_catches_up(tmp_path, moto_endpoint):
    """S3 goes down for 30 s at the first snapshot it is sent (after its preflight); the file://
    store has every set verified within seconds, the S3 one retries (logged) and catches up once
    it is back; both verified at the end, each in its own journal, the summary lists both."""
    _bucket(moto_endpoint, "ckpt")
    dest = tmp_path / "dest"
    s3_url, file_url = "s3://ckpt/p", f"file://{dest}"
    with FaultProxy(moto_endpoint) as proxy:
        proxy.down_from("PUT", SNAPSHOT_KEY, 30.0)
        proc = fake_caffe_run(tmp_path, "two", ["--upload-to", s3_url, "--upload-to", file_url, "--summary",
                                                "--upload-retry-max-delay", "2", "--drain-timeout", "90"],
                              env={**s3_env(proxy.url, tmp_path), **PLAIN}, size=32 << 10)
        went_down, came_back = proxy.went_down, proxy.came_back
    err = proc.stderr.decode()
    assert proc.returncode == 0, err[-3000:]
    assert went_down > 0, "the S3 destination was never sent a snapshot"
    run_dir = tmp_path / "two" / "run"
    healthy, down = _set_times(run_dir, file_url), _set_times(run_dir, s3_url)
    assert {name: state for name, (state, _) in healthy.items()} == dict.fromkeys(SETS, "verified")
    assert {name: state for name, (state, _) in down.items()} == dict.fromkeys(SETS, "verified")
    # The healthy store was done long before the other came back; the other only after it did.
    assert max(t for _, t in healthy.values()) < went_down + 15 < came_back
    assert min(t for _, t in down.values()) >= came_back - 0.5
    assert not (run_dir / JOURNAL_FILE).exists()  # two destinations: two journals of their own
    log = (run_dir / "train.log").read_text()
    assert "upload of p/r1/examples/mnist/lenet_iter_" in log and "; attempt 2, next in" in log  # S3 retries
    summary = read_summary(run_dir)
    assert [(d.destination, d.sets_verified, d.sets_pending, d.sets_failed) for d in summary.destinations] == [
        (s3_url, 10, 0, 0), (file_url, 10, 0, 0)]
    assert summary.uploads == summary.destinations[0]
    assert f"uploads        {s3_url}: 10 sets verified, 0 pending, 0 failed" in err
    assert f"uploads        {file_url}: 10 sets verified, 0 pending, 0 failed" in err
    snap = tmp_path / "two" / "snap"
    written = {p.relative_to(snap): p.read_bytes() for p in snap.rglob("*") if p.is_file()}
    assert len(written) == 20 and all((dest / "r1" / rel).read_bytes() == data for rel, data in written.items())


def test_resume_finishes_each_destination_from_the_saved_config(tmp_path, moto_endpoint):
    """A run whose S3 destination is down for all of it ends with the file:// one complete and
    the S3 sets pending (summary.json says so for each); `trainvisor resume` while it is still
    down exits 3 in one line; once it is back, resume verifies the rest and exits 0."""
    s3 = _bucket(moto_endpoint, "ckpt")
    dest = tmp_path / "dest"
    s3_url, file_url = "s3://ckpt/p", f"file://{dest}"
    with FaultProxy(moto_endpoint) as proxy:
        proxy.down_from("PUT", SNAPSHOT_KEY, 600.0)
        env = {**s3_env(proxy.url, tmp_path), **PLAIN}
        proc = fake_caffe_run(tmp_path, "r", ["--upload-to", s3_url, "--upload-to", file_url, "--summary",
                                              "--upload-retry-max-delay", "0.5", "--drain-timeout", "6"],
                              env=env, size=16 << 10)
        err = proc.stderr.decode()
        assert proc.returncode == 0, err[-3000:]  # the training's own code: uploads left pending resume later
        run_dir = tmp_path / "r" / "run"
        summary = json.loads((run_dir / "summary.json").read_text())
        assert [(d["destination"], d["sets_verified"], d["sets_pending"]) for d in summary["destinations"]] == [
            (s3_url, 0, 10), (file_url, 10, 0)]
        assert summary["uploads"] == summary["destinations"][0]
        assert f"uploads        {s3_url}: 0 sets verified, 10 pending, 0 failed" in err
        resume = TRAINVISOR + ["resume", str(run_dir), "--drain-timeout", "1"]
        still = subprocess.run(resume, capture_output=True, text=True, timeout=120, env=env)
        # Every destination is preflighted before anything is resumed, as at a run's start: one
        # line and exit 3, the journals untouched for the next try.
        assert (still.returncode, still.stderr) == (
            3, f"trainvisor: cannot write a probe object on {s3_url}: ConnectionClosedError\n")
        proxy.down(0)  # the store is back
        done = subprocess.run(TRAINVISOR + ["resume", str(run_dir), "--drain-timeout", "60"], capture_output=True,
                              text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"uploads to {s3_url}: 10 checkpoint sets verified, 0 pending, 0 failed" in done.stderr
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="ckpt", Prefix="p/r1/")["Contents"]}
    assert {f"p/r1/{name}.manifest.json" for name in SETS} <= keys
    assert sorted(p.name for p in run_dir.glob("uploads*.sqlite")) == sorted(
        journal_name(u, several=True) for u in (s3_url, file_url))
