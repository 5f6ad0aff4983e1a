"""Helpers for tests that SIGKILL `trainvisor run` during its uploads and look at what is left:
a fake Caffe training of a chosen log, the store's objects and open multipart uploads (moto S3
or a `file://` folder), and the run directory's upload journal."""
from __future__ import annotations

import collections
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from fixtures.caffe_log import generate_caffe_log
from tests.conftest import FAKE_CAFFE

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
MB = 1 << 20


def write_log(path: Path, *, iters: int = 40, snapshot: int = 10) -> Path:
    """A Caffe log announcing a snapshot set (weights, solver state) every `snapshot` iterations."""
    path.write_text("".join(generate_caffe_log(max_iter=iters, display=10, test_interval=20, snapshot=snapshot)))
    return path


def run_argv(work: Path, to: str, log: Path, *training: str, run_id: str = "r1", drain: float = 60) -> list[str]:
    """`trainvisor run` of fake Caffe replaying `log` into work/snap, uploading to `to`."""
    return TRAINVISOR + ["run", "--run-dir", str(work / "run"), "--run-id", run_id, "--watch", str(work / "snap"),
                         "--upload-to", to, "--drain-timeout", str(drain), "--",
                         sys.executable, str(FAKE_CAFFE), "train", str(log), "--snapshot-dir", str(work / "snap"),
                         *training]


def recorded(work: Path) -> list[str]:
    """Names of the checkpoints checkpoints.jsonl records complete (whole lines only)."""
    try:
        text = (work / "run" / "checkpoints.jsonl").read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line)["name"] for line in text.splitlines(keepends=True) if line.endswith("\n")]


def snapshots(work: Path) -> dict[str, bytes]:
    """Every snapshot file on disk by its path relative to the watched folder."""
    return {p.relative_to(work / "snap").as_posix(): p.read_bytes()
            for p in sorted((work / "snap").rglob("*")) if p.is_file()}


def journal_pairs(work: Path, query: str) -> dict[str, str]:
    """A two-column query of the run's upload journal, as a dict."""
    db = sqlite3.connect(work / "run" / "uploads.sqlite")
    try:
        return dict(db.execute(query).fetchall())
    finally:
        db.close()


def journal_rows(work: Path) -> dict[str, str]:
    return journal_pairs(work, "SELECT key, state FROM files")


def s3_objects(s3, bucket: str) -> dict[str, bytes]:
    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def open_uploads(s3, bucket: str) -> list[str]:
    return [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def folder_objects(root: Path) -> dict[str, bytes]:
    """A file:// store's objects (its temporary names aside: there must be none)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def expected_objects(work: Path, prefix: str) -> dict[str, bytes]:
    """What the store must hold once every recorded set is verified: each file under its key."""
    return {f"{prefix}/{rel}": data for rel, data in snapshots(work).items()}


def manifests(objects: dict[str, bytes]) -> dict[str, dict]:
    return {k: json.loads(v) for k, v in objects.items() if k.endswith(".manifest.json")}


def writes_by_path(proxy) -> collections.Counter:
    """Objects written in the store, by path: whole-object PUTs and completed multipart uploads
    that the store accepted (the preflight's probe aside)."""
    return collections.Counter(
        p for m, p, q, s in proxy.requests
        if s == 200 and "/.trainvisor-probe-" not in p and (
            (m == "PUT" and "partNumber=" not in q) or (m == "POST" and "uploadId=" in q)))


def run(argv: list[str], work: Path, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
