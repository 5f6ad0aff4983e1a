"""Kodo: an upload the store completed just before trainvisor was killed (the journal still says
`uploading`) is recognised on restart by stat (size and qiniu etag) and not sent again."""
from __future__ import annotations

import os

from trainvisor.events import Checkpoint, CheckpointFile
from trainvisor.uploaders import open_uploader
from trainvisor.uploaders.journal import Journal
from trainvisor.uploaders.manager import UploadManager

MB = 1 << 20


def _checkpoint(tmp_path, size: int) -> Checkpoint:
    path = tmp_path / "model_step_9.pt"
    path.write_bytes(os.urandom(size))
    return Checkpoint(name="model_step_9", files=(CheckpointFile(str(path), "model_step_9.pt"),),
                      iteration=9, epoch=None, root=str(tmp_path))


def _killed_after_the_store_completed(kodo, tmp_path, cp: Checkpoint) -> str:
    """What a killed trainvisor leaves: the set and file journaled, the attempt started
    (`uploading`), the object complete in the store, the verification never journaled."""
    run_dir = str(tmp_path / "run")
    key, f = "p/r1/model_step_9.pt", cp.files[0]
    journal = Journal(run_dir)
    st = os.stat(f.path)
    journal.queue(key, f.path, size=st.st_size, mtime_ns=st.st_mtime_ns)
    journal.add_set("p/r1/model_step_9.manifest.json", cp)
    journal.start(key)
    journal.close()
    open_uploader("kodo://ckpt/p", state_dir=run_dir).upload(f.path, key)
    assert kodo.object_writes("ckpt", key) == 1
    return run_dir


def test_the_restart_stats_the_object_and_sends_nothing(kodo, tmp_path):
    cp = _checkpoint(tmp_path, 9 * MB)  # a resumable upload (4 MiB parts)
    run_dir = _killed_after_the_store_completed(kodo, tmp_path, cp)
    sent = kodo.bytes_received
    with UploadManager(open_uploader("kodo://ckpt/p", state_dir=run_dir), run_dir=run_dir, run_id="r1",
                       prefix="p") as m:
        assert m.resume() == 1
        report = m.drain(30)
    assert report.pending == () and report.failed == ()
    assert report.verified == ("p/r1/model_step_9.manifest.json", "p/r1/model_step_9.pt")
    assert kodo.object_writes("ckpt", "p/r1/model_step_9.pt") == 1  # not written again
    assert kodo.bytes_received - sent < 4096  # only the manifest's form upload went up
    assert m.progress().files_skipped == 1


def test_another_version_in_the_store_is_uploaded_again(kodo, tmp_path):
    cp = _checkpoint(tmp_path, 2 * MB)  # a form upload
    run_dir = _killed_after_the_store_completed(kodo, tmp_path, cp)
    with open(cp.files[0].path, "r+b") as fh:  # same size, other bytes: the stored object is stale
        fh.write(b"changed")
    with UploadManager(open_uploader("kodo://ckpt/p", state_dir=run_dir), run_dir=run_dir, run_id="r1",
                       prefix="p") as m:
        m.resume()
        report = m.drain(30)
    assert report.failed == () and report.pending == ()
    assert kodo.object_writes("ckpt", "p/r1/model_step_9.pt") == 2
    with open(cp.files[0].path, "rb") as fh:
        assert kodo.read_object("ckpt", "p/r1/model_step_9.pt") == fh.read()
