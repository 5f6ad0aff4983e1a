"""`--upload-policy last`: a queued set a newer one superseded before its upload began is skipped
(journaled, counted), never sent; one that started is finished; the newest is always uploaded."""
from __future__ import annotations

import os
import threading

import boto3
import pytest

from tests.faultproxy import FaultProxy
from trainvisor.events import Checkpoint, CheckpointFile
from trainvisor.uploaders import LocalUploader
from trainvisor.uploaders.journal import QUEUED, SKIPPED, VERIFIED, Journal
from trainvisor.uploaders.manager import UploadManager
from trainvisor.uploaders.s3 import S3Uploader
from trainvisor.uploaders.superseded import SupersededSets
from trainvisor.watch.record import CheckpointRecord


def _snapshot(folder, step: int, size: int = 64 << 10) -> Checkpoint:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"model_step_{step}.pt"
    path.write_bytes(os.urandom(size))
    return Checkpoint(name=path.name, files=(CheckpointFile(str(path), path.name),), iteration=step, epoch=None,
                      root=str(folder), framework="pytorch")


def test_the_newest_set_is_never_superseded_and_an_older_one_only_when_the_policy_skips():
    sets = SupersededSets(enabled=True)
    first, second = sets.submitted({"a"}, 10, 1), sets.submitted({"b"}, 20, 1)
    assert sets.starting(second) is None  # the newest goes
    skipped = sets.starting(first)
    assert skipped is not None and skipped.keys == {"a"} and skipped.nbytes == 10
    off = SupersededSets(enabled=False)
    older = off.submitted({"a"}, 10, 1)
    off.submitted({"b"}, 20, 1)
    assert off.starting(older) is None


def test_keys_a_live_set_shares_are_left_to_it():
    """`last.ckpt` written again: the older submission is skipped, its key stays the newer one's."""
    sets = SupersededSets(enabled=True)
    older = sets.submitted({"r/last.ckpt", "r/last.manifest.json", "r/shared.yaml"}, 30, 2)
    sets.submitted({"r/last.ckpt", "r/last.manifest.json"}, 30, 1)
    assert sets.starting(older).keys == {"r/shared.yaml"}


@pytest.fixture
def slow_store(moto):
    """The S3 store behind the fault proxy, every checkpoint file's PUT held 1.5 s: a slow link."""
    boto3.client("s3", endpoint_url=moto).create_bucket(Bucket="ckpt")
    with FaultProxy(moto) as proxy:
        proxy.inject("PUT", r"/ckpt/p/r1/model_step_\d+\.pt$", 1.5, times=100)
        yield proxy


def test_of_10_quick_snapshots_only_those_started_are_uploaded_and_the_newest_always(slow_store, tmp_path):
    up = S3Uploader("ckpt", url="s3://ckpt/p", endpoint_url=slow_store.url)
    run_dir = tmp_path / "run"
    with UploadManager(up, run_dir=str(run_dir), run_id="r1", prefix="p", skip_superseded=True) as m:
        futures = [m.submit(_snapshot(tmp_path / "ckpt", step)) for step in range(1, 11)]
        report = m.drain(60)
        outcomes = {f.result().set_key: f.result().state for f in futures}
        progress = m.progress()
    manifest = "p/r1/model_step_{}.pt.manifest.json".format
    sent = {int(p.rsplit("_", 1)[1][:-3]) for method, p, _q, status in slow_store.requests
            if method == "PUT" and p.endswith(".pt") and status == 200}
    verified = {int(k.split("_")[-1].split(".")[0]) for k, s in outcomes.items() if s == VERIFIED}
    skipped = {int(k.split("_")[-1].split(".")[0]) for k, s in outcomes.items() if s == SKIPPED}
    assert verified | skipped == set(range(1, 11)) and not verified & skipped
    assert 10 in verified  # the newest, always
    assert sent == verified  # a skipped set never sent a byte; every started one finished
    assert len(skipped) >= 6  # two workers on a 1.5 s link: only the first sets started before the 10th came
    assert report.pending == () and report.failed == ()
    assert report.sets.skipped == tuple(sorted(manifest(s) for s in skipped))
    assert progress.sets_skipped == len(skipped) and progress.sets_verified == len(verified)
    assert progress.bytes_total == len(verified) * (64 << 10)  # the skipped sets' bytes no longer expected
    j = Journal(str(run_dir))
    try:
        assert {s: j.set_state(manifest(s)) for s in range(1, 11)} == {
            s: VERIFIED if s in verified else SKIPPED for s in range(1, 11)}
        assert j.get("p/r1/model_step_3.pt").state in (VERIFIED, SKIPPED)
        assert [e.key for e in j.unfinished()] == []
    finally:
        j.close()


def test_a_restart_does_not_upload_what_was_skipped(tmp_path):
    """checkpoints.jsonl records every set; the journal's `skipped` keeps a resume from sending them."""
    run_dir = tmp_path / "run"
    record = CheckpointRecord(run_dir / "checkpoints.jsonl")
    cps = [_snapshot(tmp_path / "ckpt", step, 1024) for step in (1, 2, 3)]
    run_dir.mkdir()
    for cp in cps:
        record.submit(cp)
    j = Journal(str(run_dir))
    for cp in cps:
        j.queue(f"r1/{cp.name}", cp.files[0].path, size=1024, mtime_ns=os.stat(cp.files[0].path).st_mtime_ns)
        j.add_set(f"r1/{cp.name}.manifest.json", cp)
    j.skip("r1/model_step_1.pt.manifest.json", ["r1/model_step_1.pt"])
    j.skip("r1/model_step_2.pt.manifest.json", ["r1/model_step_2.pt"])
    assert j.get("r1/model_step_3.pt").state == QUEUED
    j.close()
    with UploadManager(LocalUploader(str(tmp_path / "store")), run_dir=str(run_dir), run_id="r1",
                       skip_superseded=True) as m:
        assert m.resume() == 1  # the newest only: it was still queued
        report = m.drain(30)
    assert report.sets.verified == ("r1/model_step_3.pt.manifest.json",)
    assert sorted(p.name for p in (tmp_path / "store" / "r1").iterdir()) == [
        "model_step_3.pt", "model_step_3.pt.manifest.json"]


def test_a_set_found_late_with_an_older_step_does_not_displace_the_newest():
    """The watcher may hand over an early snapshot at the end (written before its folder was
    watched): by its iteration it is older, so it is the one skipped, not the training's last."""
    sets = SupersededSets(enabled=True)
    last = sets.submitted({"r/it_1000"}, 1, 1, ("iteration", 1000))
    early = sets.submitted({"r/it_100"}, 1, 1, ("iteration", 100))
    assert sets.starting(last) is None
    assert sets.starting(early).keys == {"r/it_100"}
    # No step, or steps of another kind: the later handed over is the newer.
    mixed = SupersededSets(enabled=True)
    by_epoch = mixed.submitted({"a"}, 1, 1, ("epoch", 3.0))
    by_name = mixed.submitted({"b"}, 1, 1, None)
    assert mixed.starting(by_epoch) is not None and mixed.starting(by_name) is None


class GatedStore(LocalUploader):
    """A real file:// store whose first upload waits for the test's word: an upload in flight."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.started, self.go = threading.Event(), threading.Event()

    def upload(self, local_path, key, *, progress=None):
        if not self.started.is_set():
            self.started.set()
            self.go.wait(30)
        return super().upload(local_path, key, progress=progress)


def test_an_upload_in_flight_is_finished_and_a_set_written_again_replaces_its_queued_version(tmp_path):
    store = GatedStore(str(tmp_path / "store"))
    folder = tmp_path / "ckpt"
    with UploadManager(store, run_dir=str(tmp_path / "run"), run_id="r1", concurrency=1, skip_superseded=True) as m:
        first = m.submit(_snapshot(folder, 1))
        assert store.started.wait(30)
        last = folder / "last.ckpt"
        cp = Checkpoint(name="last.ckpt", files=(CheckpointFile(str(last), "last.ckpt"),), iteration=None, epoch=None,
                        root=str(folder), framework="pytorch")
        last.write_bytes(b"first state")
        older = m.submit(cp)
        last.write_bytes(b"second state, written before the first was sent")
        newer = m.submit(cp)
        store.go.set()
        report = m.drain(30)
        progress = m.progress()
    assert [f.result().state for f in (first, older, newer)] == [VERIFIED, SKIPPED, VERIFIED]
    assert (tmp_path / "store" / "r1" / "last.ckpt").read_bytes() == b"second state, written before the first was sent"
    # The same set queued again is not a set skipped: the journal and the counts hold it verified.
    assert report.sets.verified == ("r1/last.ckpt.manifest.json", "r1/model_step_1.pt.manifest.json")
    assert report.sets.skipped == () and progress.sets_skipped == 0 and report.pending == ()
