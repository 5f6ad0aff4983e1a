"""UploadManager against the real file:// store: sets verified, manifest last, retries, failures."""
from __future__ import annotations

import json
import os

from trainvisor.events import Checkpoint, CheckpointFile
from trainvisor.uploaders import LocalUploader, UploadError
from trainvisor.uploaders.manager import RetryPolicy, UploadManager


def _checkpoint(tmp_path, n=2):
    snap = tmp_path / "snap"
    snap.mkdir(exist_ok=True)
    files = []
    for ext in ("caffemodel", "solverstate")[:n]:
        p = snap / f"net_iter_100.{ext}"
        p.write_bytes(ext.encode() * 1000)
        files.append(CheckpointFile(path=str(p), relpath=p.name))
    return Checkpoint(name="net_iter_100", files=tuple(files), iteration=100, epoch=1.0, root=str(snap))


class FlakyStore(LocalUploader):
    """A real local store whose first `n` uploads raise a retryable error."""

    def __init__(self, root, n):
        super().__init__(root)
        self.left = n

    def upload(self, local_path, key, *, progress=None):
        if self.left:
            self.left -= 1
            raise UploadError("503 Service Unavailable", retryable=True)
        return super().upload(local_path, key, progress=progress)


def test_checkpoint_set_and_manifest_are_uploaded_and_verified(tmp_path):
    store = tmp_path / "store"
    m = UploadManager(FlakyStore(str(store), 3), run_dir=str(tmp_path / "run"), run_id="r1",
                      prefix="ckpt", sleep=lambda s: None)
    cp = _checkpoint(tmp_path)
    m.submit(cp)
    report = m.drain(10)
    m.close()
    assert report.pending == () and report.failed == ()
    manifest = json.loads((store / "ckpt/r1/net_iter_100.manifest.json").read_text())
    assert [f["key"] for f in manifest["files"]] == ["ckpt/r1/net_iter_100.caffemodel", "ckpt/r1/net_iter_100.solverstate"]
    assert manifest["iteration"] == 100
    for f in cp.files:
        assert (store / "ckpt/r1" / f.relpath).read_bytes() == open(f.path, "rb").read()


def test_permanent_error_leaves_no_manifest_and_is_reported(tmp_path):
    store = tmp_path / "store"
    m = UploadManager(FlakyStore(str(store), 100), run_dir=str(tmp_path / "run"), run_id="r1",
                      retry=RetryPolicy(attempts=2), sleep=lambda s: None)
    m.submit(_checkpoint(tmp_path, 1))
    report = m.drain(5)
    m.close()
    assert "r1/net_iter_100.caffemodel" in report.failed
    assert not (store / "r1/net_iter_100.manifest.json").exists()


class RewrittenDuringUpload(LocalUploader):
    """A real local store; while the first upload runs, the training rewrites the file."""

    def __init__(self, root):
        super().__init__(root)
        self.calls = 0

    def upload(self, local_path, key, *, progress=None):
        self.calls += 1
        obj = super().upload(local_path, key, progress=progress)
        if self.calls == 1:
            with open(local_path, "ab") as fh:
                fh.write(b"second state")
        return obj


def test_a_file_rewritten_during_its_upload_is_uploaded_again_in_its_new_state(tmp_path):
    store = tmp_path / "store"
    up = RewrittenDuringUpload(str(store))
    m = UploadManager(up, run_dir=str(tmp_path / "run"), run_id="r1", sleep=lambda s: None)
    cp = _checkpoint(tmp_path, 1)
    m.submit(cp)
    report = m.drain(10)
    m.close()
    assert report.pending == () and report.failed == ()
    final = open(cp.files[0].path, "rb").read()
    assert final.endswith(b"second state")
    assert (store / "r1" / cp.files[0].relpath).read_bytes() == final  # never left in the old state
    manifest = json.loads((store / "r1/net_iter_100.manifest.json").read_text())
    assert manifest["files"][0]["size"] == len(final)
    assert up.calls == 3  # the file, again after the change, then the manifest


class CountingStore(LocalUploader):
    """A real local store that counts the uploads of each key."""

    def __init__(self, root):
        super().__init__(root)
        self.keys = []

    def upload(self, local_path, key, *, progress=None):
        self.keys.append(key)
        return super().upload(local_path, key, progress=progress)


def test_a_restart_resumes_the_unfinished_set_and_uploads_nothing_twice(tmp_path):
    """The state a SIGKILLed trainvisor leaves: the set journaled, its weights verified, the
    solverstate caught mid-upload. A new manager on the same run directory finishes the set."""
    from trainvisor.uploaders.journal import Journal

    store, run = tmp_path / "store", tmp_path / "run"
    cp = _checkpoint(tmp_path)
    first = CountingStore(str(store))
    j = Journal(str(run))
    for f in cp.files:
        st = (tmp_path / "snap" / f.relpath).stat()
        j.queue(f"r1/{f.relpath}", f.path, size=st.st_size, mtime_ns=st.st_mtime_ns)
    j.add_set("r1/net_iter_100.manifest.json", cp)
    weights = cp.files[0]
    j.start(f"r1/{weights.relpath}")
    obj = first.upload(weights.path, f"r1/{weights.relpath}")
    st = (tmp_path / "snap" / weights.relpath).stat()
    j.verified(f"r1/{weights.relpath}", obj.checksum, size=st.st_size, mtime_ns=st.st_mtime_ns)
    j.start(f"r1/{cp.files[1].relpath}")
    j.close()

    again = CountingStore(str(store))
    m = UploadManager(again, run_dir=str(run), run_id="r1", sleep=lambda s: None)
    assert m.resume() == 1
    report = m.drain(10)
    progress = m.progress()
    m.close()
    assert report.pending == () and report.failed == ()
    assert again.keys == ["r1/net_iter_100.solverstate", "r1/net_iter_100.manifest.json"]
    assert (progress.files_done, progress.files_skipped) == (3, 1)
    manifest = json.loads((store / "r1/net_iter_100.manifest.json").read_text())
    assert [f["checksum"] for f in manifest["files"]][0] == obj.checksum
    for f in cp.files:
        assert (store / "r1" / f.relpath).read_bytes() == open(f.path, "rb").read()
    # A third start finds nothing left to do.
    m = UploadManager(CountingStore(str(store)), run_dir=str(run), run_id="r1")
    assert m.resume() == 0
    m.close()


def test_a_resumed_set_whose_files_are_gone_is_reported_failed(tmp_path):
    from trainvisor.uploaders.journal import Journal

    cp = _checkpoint(tmp_path)
    j = Journal(str(tmp_path / "run"))
    j.add_set("r1/net_iter_100.manifest.json", cp)
    j.close()
    os.unlink(cp.files[1].path)
    m = UploadManager(CountingStore(str(tmp_path / "store")), run_dir=str(tmp_path / "run"), run_id="r1")
    assert m.resume() == 0
    report = m.drain(1)
    m.close()
    assert report.failed == ("r1/net_iter_100.solverstate",)
