"""trainvisor killed with SIGKILL in the middle of a 200 MB upload, then started again on the
same run directory: the upload resumes from the parts the store has, completes once, and the
stored object is byte-identical. Kodo (resumable v2, the SDK's progress record) and S3 (the
multipart UploadId recorded in the run directory, ListParts on restart)."""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys

from tests.conftest import s3_env
from tests.faultproxy import FaultProxy
from tests.test_process_tree import wait_for  # the store's counters tell nobody: they are looked at

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
SIZE = 200 * (1 << 20) + 12345


def _big_file(path) -> str:
    block = os.urandom(1 << 20)
    with open(path, "wb") as fh:
        for i in range(SIZE >> 20):
            fh.write(i.to_bytes(8, "little") + block[8:])
        fh.write(block[: SIZE & ((1 << 20) - 1)])
    return str(path)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_sigkill_mid_upload_then_restart_resumes_and_uploads_once(kodo, tmp_path):
    src = _big_file(tmp_path / "model_step_9000.pt")
    run_dir = tmp_path / "run"
    argv = TRAINVISOR + ["upload", src, "--to", "kodo://ckpt/backup", "--run-dir", str(run_dir), "--no-progress"]
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path)
    wait_for(lambda: kodo.bytes_received >= SIZE // 3 or first.poll() is not None, 120, "a third of the upload")
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    first.stderr.close()
    sent_before_kill = kodo.bytes_received
    assert SIZE // 3 <= sent_before_kill < SIZE, "the kill did not land in the middle of the upload"
    assert kodo.object_path("ckpt", "backup/model_step_9000.pt") is None

    second = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    assert kodo.object_writes("ckpt", "backup/model_step_9000.pt") == 1
    with open(src, "rb") as fh:
        assert _sha256(kodo.read_object("ckpt", "backup/model_step_9000.pt")) == _sha256(fh.read())
    resent = kodo.bytes_received - SIZE
    # Everything but the parts in flight at the kill (3 workers x 4 MiB, plus the one being
    # recorded) came from the record, not from a second full upload.
    assert resent < 8 * (4 << 20), f"{resent} bytes sent twice"
    assert not any((run_dir / "kodo-progress").iterdir())  # the record is gone once verified


def test_s3_sigkill_mid_upload_then_restart_resumes_the_same_multipart_upload(moto_endpoint, tmp_path):
    import boto3

    src = _big_file(tmp_path / "net_iter_9000.caffemodel")
    parts = -(-SIZE // (8 << 20))
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    s3.create_bucket(Bucket="ckpt")
    run_dir = tmp_path / "run"
    with FaultProxy(moto_endpoint) as proxy:
        env = s3_env(proxy.url, tmp_path)
        argv = TRAINVISOR + ["upload", src, "--to", "s3://ckpt/backup", "--run-dir", str(run_dir), "--no-progress"]
        first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path, env=env)
        wait_for(lambda: len(proxy.accepted_parts()) >= parts // 3 or first.poll() is not None, 120,
                 "a third of the parts")
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        first.stderr.close()
        confirmed = set(proxy.accepted_parts())
        assert parts // 3 <= len(confirmed) < parts, "the kill did not land in the middle of the upload"
        assert proxy.count("POST", r"(^|&)uploadId=", status=200) == 0  # not completed
        assert list((run_dir / "s3-progress").glob("*.json")), "the UploadId was not recorded before the parts"
        before = len(proxy.requests)

        second = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        assert second.returncode == 0, second.stderr[-2000:]
        resent = set(proxy.accepted_parts(since=before))
        assert proxy.count("POST", r"(^|&)uploads(=|&|$)", status=200) == 1  # one multipart upload, resumed
        assert proxy.count("POST", r"(^|&)uploadId=", status=200) == 1  # completed once
    # The restart sent only parts the store did not hold: none it had confirmed before the kill.
    assert resent and not resent & confirmed
    assert len(resent) <= parts - len(confirmed)
    with open(src, "rb") as fh:
        stored = s3.get_object(Bucket="ckpt", Key="backup/net_iter_9000.caffemodel")["Body"].read()
        assert _sha256(stored) == _sha256(fh.read())
    assert s3.list_multipart_uploads(Bucket="ckpt").get("Uploads", []) == []  # nothing left billed
    assert not list((run_dir / "s3-progress").glob("*.json"))  # the record is gone once verified

