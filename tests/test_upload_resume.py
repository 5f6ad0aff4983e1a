"""trainvisor killed with SIGKILL in the middle of a 200 MB upload, then started again on the
same run directory: the upload resumes from the parts the store has, completes once, and the
stored object is byte-identical."""
from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time

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
    deadline = time.monotonic() + 120
    while kodo.bytes_received < SIZE // 3 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
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
