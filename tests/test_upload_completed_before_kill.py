"""The store completes a multipart upload, and trainvisor dies before it hears so: the fault
proxy holds the CompleteMultipartUpload reply and trainvisor is SIGKILLed meanwhile (or, in
process, the reply is lost). ListParts then answers NoSuchUpload for the recorded UploadId; the
restart HEADs the object, finds the local file's size and multipart ETag, journals it verified
and sends nothing again: no part, no new upload, no second completion."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys

import boto3
from botocore.config import Config

from tests.conftest import s3_env
from tests.faultproxy import FaultProxy, HoldReply
from tests.test_process_tree import wait_for  # the store's counters tell nobody: they are looked at

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
MB = 1 << 20
COMPLETE = r"(^|&)uploadId="


def _file(path, size: int) -> str:
    with open(path, "wb") as fh:
        for i in range(0, size, MB):
            fh.write(i.to_bytes(8, "little") + os.urandom(min(MB, size - i) - 8))
    return str(path)


def _bucket(moto_endpoint: str):
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    s3.create_bucket(Bucket="ckpt")
    return s3


def _sent(proxy: FaultProxy, since: int) -> list[tuple[str, str]]:
    """What the restart wrote to the store (the preflight's probe object aside): parts, puts,
    new or completed uploads."""
    return [(m, p, q) for m, p, q, _ in proxy.requests[since:]
            if m in ("PUT", "POST") and "/.trainvisor-probe-" not in p]


def _journal_state(run_dir, key: str) -> tuple[str, str]:
    db = sqlite3.connect(run_dir / "uploads.sqlite")
    try:
        return db.execute("SELECT state, checksum FROM files WHERE key=?", (key,)).fetchone()
    finally:
        db.close()


def test_sigkill_while_the_store_completes_the_upload_then_the_restart_sends_nothing(moto_endpoint, tmp_path):
    src = _file(tmp_path / "net_iter_500.caffemodel", 20 * MB + 4321)  # 3 parts of 8 MiB
    s3 = _bucket(moto_endpoint)
    run_dir = tmp_path / "run"
    key = "backup/net_iter_500.caffemodel"
    with FaultProxy(moto_endpoint) as proxy:
        env = s3_env(proxy.url, tmp_path)
        argv = TRAINVISOR + ["upload", src, "--to", "s3://ckpt/backup", "--run-dir", str(run_dir), "--no-progress"]
        proxy.inject("POST", r"/ckpt/backup/net_iter_500\.caffemodel$", HoldReply(60), query_regex=COMPLETE)
        first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path, env=env)
        wait_for(lambda: proxy.count("POST", COMPLETE, status=200) > 0 or first.poll() is not None, 60,
                 "the store to complete the upload")
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        assert proxy.count("POST", COMPLETE, status=200) == 1, "the store did not complete the upload"
        assert s3.list_multipart_uploads(Bucket="ckpt").get("Uploads", []) == []  # completed in the store
        assert list((run_dir / "s3-progress").glob("*.json")), "the kill landed after the record was forgotten"
        assert _journal_state(run_dir, key)[0] == "uploading"
        before = len(proxy.requests)

        second = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
        assert second.returncode == 0, second.stderr[-2000:]
        assert _sent(proxy, before) == []  # no part, no new upload, no completion
        assert proxy.count("HEAD", "") >= 1
    stored = s3.get_object(Bucket="ckpt", Key=key)
    with open(src, "rb") as fh:
        assert stored["Body"].read() == fh.read()
    state, checksum = _journal_state(run_dir, key)
    # Verified by the CRC32C the store returns (moto leaves the composite's `-N` off: recorded with it)
    crc = s3.head_object(Bucket="ckpt", Key=key, ChecksumMode="ENABLED")["ChecksumCRC32C"]
    assert (state, checksum) == ("verified", f"crc32c:{crc}-3")
    assert stored["ETag"].strip('"').endswith("-3")
    assert not list((run_dir / "s3-progress").glob("*.json"))  # the record is gone once verified


def test_a_lost_complete_reply_is_recognised_by_the_retry_not_sent_again(moto_endpoint, tmp_path, monkeypatch):
    """In one process: the store completed, the replies never came (read timeouts), the attempt
    failed; the next one hears NoSuchUpload from ListParts, finds the object and sends nothing."""
    from trainvisor.events import Checkpoint, CheckpointFile
    from trainvisor.uploaders.manager import RetryPolicy, UploadManager
    from trainvisor.uploaders.s3 import S3Uploader

    for name, value in s3_env(moto_endpoint, tmp_path).items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_METADATA_SERVICE_TIMEOUT", "1")
    src = _file(tmp_path / "net_iter_7.caffemodel", 17 * MB)
    s3 = _bucket(moto_endpoint)
    with FaultProxy(moto_endpoint) as proxy:
        up = S3Uploader("ckpt", url="s3://ckpt/p", endpoint_url=proxy.url, state_dir=str(tmp_path / "run"))
        # A client with a short read timeout: the held reply is a lost one.
        up._client = boto3.client("s3", endpoint_url=proxy.url, config=Config(
            read_timeout=1, retries={"max_attempts": 3, "mode": "standard"}))
        # Every reply to Complete lost (every try botocore makes): the attempt fails.
        proxy.inject("POST", r"/ckpt/p/r1/net_iter_7\.caffemodel$", HoldReply(2), times=10, query_regex=COMPLETE)
        with UploadManager(up, run_dir=str(tmp_path / "run"), run_id="r1", prefix="p",
                           retry=RetryPolicy(base=0.01, cap=0.05), manifests=False) as m:
            m.submit(Checkpoint(name="net_iter_7", files=(CheckpointFile(src, "net_iter_7.caffemodel"),),
                                iteration=7, epoch=None, root=str(tmp_path)))
            report = m.drain(60)
        assert report.verified == ("p/r1/net_iter_7.caffemodel",) and report.pending == ()
        assert proxy.count("POST", r"(^|&)uploads(=|&|$)") == 1  # one multipart upload, never a second
        assert sorted(proxy.accepted_parts()) == [1, 2, 3]  # each part sent once
        assert proxy.count("GET", COMPLETE) == 1  # ListParts of the retry: NoSuchUpload
    with open(src, "rb") as fh:
        assert s3.get_object(Bucket="ckpt", Key="p/r1/net_iter_7.caffemodel")["Body"].read() == fh.read()
    assert json.dumps(s3.list_multipart_uploads(Bucket="ckpt").get("Uploads", [])) == "[]"
