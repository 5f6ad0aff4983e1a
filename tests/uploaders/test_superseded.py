"""`--upload-policy last`: a queued set a newer one superseded before its upload began is skipped
(journaled, counted), never sent; one that started is finished; the newest is always uploaded.
The same for a queued set retention (--keep-last, --keep-best) would delete as soon as it is
verified; a set whose --best-by value is not known yet is kept."""
from __future__ import annotations

import os
import threading
from typing import Optional

import boto3
import pytest

from tests.conftest import real_logs
from tests.faultproxy import FaultProxy
from trainvisor.calls.logs import replay
from trainvisor.events import Checkpoint, CheckpointEvent, CheckpointFile
from trainvisor.uploaders import LocalUploader
from trainvisor.uploaders.journal import QUEUED, SKIPPED, VERIFIED, Journal
from trainvisor.uploaders.manager import UploadManager
from trainvisor.uploaders.retention import RetentionPolicy, parse_best_by
from trainvisor.uploaders.s3 import S3Uploader
from trainvisor.uploaders.superseded import SupersededSets
from trainvisor.uploaders.values import BestByValues
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
        proxy.inject("PUT", r"/ckpt/p/\w+/model_step_\d+\.pt$", 1.5, times=100)
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


# Retention that would delete a set at once (issue 24): with --keep-last / --keep-best, a queued
# set the policy would not keep, judged with the newer sets already handed over, is skipped as
# `--upload-policy last` skips (the same journal state, the same count); undecided: kept.

def _numbers(keys) -> set[int]:
    """Set keys (…/model_step_N.pt.manifest.json) -> the steps N."""
    return {int(k.split("_")[-1].split(".")[0]) for k in keys}


def _stored_sets(endpoint: str, run_id: str) -> set[int]:
    """The sets the store holds (their manifests) under the run's keys; moto's servers in one
    process share their buckets, so each test's run has an id of its own."""
    s3 = boto3.client("s3", endpoint_url=endpoint)
    listed = s3.list_objects_v2(Bucket="ckpt", Prefix=f"p/{run_id}/").get("Contents", [])
    return _numbers(o["Key"] for o in listed if o["Key"].endswith(".manifest.json"))


def _outcomes(futures) -> dict[str, set[int]]:
    by_state: dict[str, set[int]] = {}
    for f in futures:
        by_state.setdefault(f.result().state, set()).update(_numbers([f.result().set_key]))
    return by_state


def test_with_keep_last_2_the_sets_retention_would_drop_at_once_are_skipped(slow_store, moto, tmp_path, caplog):
    """Ten quick snapshots on a slow link, two workers: the first two start at once; every later
    one starts after all ten were handed over, so all but the two newest have two newer sets:
    retention would delete them as soon as they are verified, so they are skipped, journaled so,
    never sent. The store ends with the two newest; the two that started early were deleted."""
    caplog.set_level("INFO", logger="trainvisor.upload")
    up = S3Uploader("ckpt", url="s3://ckpt/p", endpoint_url=slow_store.url)
    run_dir = tmp_path / "run"
    with UploadManager(up, run_dir=str(run_dir), run_id="last2", prefix="p", concurrency=2,
                       retention=RetentionPolicy(keep_last=2)) as m:
        futures = [m.submit(_snapshot(tmp_path / "ckpt", step)) for step in range(1, 11)]
        report = m.drain(60)
        progress = m.progress()
    states = _outcomes(futures)
    verified, skipped = states.get(VERIFIED, set()), states.get(SKIPPED, set())
    assert set(states) <= {VERIFIED, SKIPPED} and verified | skipped == set(range(1, 11))
    assert {9, 10} <= verified and set(range(3, 9)) <= skipped  # the two early starters: either
    sent = {int(p.rsplit("_", 1)[1][:-3]) for method, p, _q, status in slow_store.requests
            if method == "PUT" and p.endswith(".pt") and status == 200}
    assert sent == verified  # a skipped set never sent a byte
    assert _stored_sets(moto, "last2") == {9, 10} and _numbers(report.sets.skipped) == skipped
    assert progress.sets_skipped == len(skipped) and report.pending == () and report.failed == ()
    j = Journal(str(run_dir))
    try:
        assert {s for s in range(1, 11) if j.set_state(f"p/last2/model_step_{s}.pt.manifest.json") == SKIPPED} == skipped
    finally:
        j.close()
    said = [r.getMessage() for r in caplog.records if "skipped: retention (keep-last 2)" in r.getMessage()]
    assert len(said) == len(skipped)


def _caffe_values(upto: Optional[int] = None) -> tuple[BestByValues, dict[int, float], list[int]]:
    """The real Caffe log's test accuracies as a run's --best-by sink gets them (its parser), all
    decided (the log ended) or, with `upto`, only the records up to that iteration (a live run's
    log not yet past it); also the accuracies by iteration and the snapshot iterations."""
    replayed = replay(real_logs("caffe") / "bearpaw-fork-mnist.log", parser="caffe")
    tests = {m.iteration: m.value for m in replayed.metrics
             if m.phase == "test" and m.name == "accuracy" and not m.test_net and not m.running}
    snapshots = sorted({e.iteration for e in replayed.events if type(e) is CheckpointEvent})
    values = BestByValues(parse_best_by("accuracy max"))
    values.write([m for m in replayed.metrics if upto is None or (m.iteration or 0) <= upto])
    if upto is None:
        values.close()
    return values, tests, snapshots


def test_keep_best_on_a_real_caffe_log_skips_the_outranked_and_uploads_the_older_best(slow_store, moto, tmp_path):
    """bearpaw's LeNet run: ten snapshots (1000..10000), its best test accuracy older than the
    last two. With --keep-last 2 --keep-best 1 a set that started once all were handed over is
    skipped exactly when it is not among the two newest and a newer set is at least as good; the
    best is uploaded, and the store ends with it and the two newest."""
    values, tests, snapshots = _caffe_values()

    def accuracy(it: int) -> float:
        return tests[max(k for k in tests if k <= it)]

    best = max(snapshots, key=lambda it: (accuracy(it), it))
    assert len(snapshots) == 10 and best not in snapshots[-2:]  # what makes the log worth the test
    up = S3Uploader("ckpt", url="s3://ckpt/p", endpoint_url=slow_store.url)
    with UploadManager(up, run_dir=str(tmp_path / "run"), run_id="best1", prefix="p", concurrency=2, values=values,
                       retention=RetentionPolicy.of(2, 1, "accuracy max")) as m:
        futures = [m.submit(_snapshot(tmp_path / "ckpt", it)) for it in snapshots]
        report = m.drain(90)
    states = _outcomes(futures)
    verified, skipped = states.get(VERIFIED, set()), states.get(SKIPPED, set())

    def dropped(it: int) -> bool:  # the policy, from the log's own numbers, over this set and the newer
        newer = [n for n in snapshots if n > it]
        return it not in snapshots[-2:] and any(accuracy(n) >= accuracy(it) for n in newer)

    assert verified | skipped == set(snapshots) and report.pending == () and report.failed == ()
    assert skipped and all(dropped(it) for it in skipped)  # never a set the policy keeps
    assert {it for it in snapshots[2:] if dropped(it)} == skipped - set(snapshots[:2])
    assert best in verified and set(snapshots[-2:]) <= verified
    assert _stored_sets(moto, "best1") == {best, *snapshots[-2:]}


def _held_run(tmp_path, tag: str, values: BestByValues, snapshots: list[int]) -> dict[str, set[int]]:
    """Every snapshot handed over while the first one's upload is held, to a file:// store with
    --keep-best 1 alone; the sets by outcome."""
    store = GatedStore(str(tmp_path / tag / "store"))
    with UploadManager(store, run_dir=str(tmp_path / tag / "run"), run_id="r1", concurrency=1, values=values,
                       retention=RetentionPolicy.of(None, 1, "accuracy max")) as m:
        futures = [m.submit(_snapshot(tmp_path / tag / "ckpt", snapshots[0]))]
        assert store.started.wait(30)  # the first is uploading: every other one is queued behind it
        futures += [m.submit(_snapshot(tmp_path / tag / "ckpt", it)) for it in snapshots[1:]]
        store.go.set()
        m.drain(60)
    return _outcomes(futures)


def test_a_set_whose_value_is_not_known_yet_is_never_skipped(tmp_path):
    """The log has reached iteration 3000 only: the sets after it are undecided, so they neither
    get skipped nor outrank an older one, and nothing is skipped; the same sets once the log has
    ended (every value decided) are mostly skipped."""
    early, _tests, snapshots = _caffe_values(upto=3000)
    assert _held_run(tmp_path, "live", early, snapshots) == {VERIFIED: set(snapshots)}
    ended, _tests, _ = _caffe_values()
    decided = _held_run(tmp_path, "ended", ended, snapshots)
    assert len(decided.get(SKIPPED, ())) >= 5 and snapshots[-1] in decided[VERIFIED]


class RefusingStore(GatedStore):
    """The gated file:// store, refusing (for good) every upload of one step's files."""

    def __init__(self, root: str, refused: str) -> None:
        super().__init__(root)
        self.refused = refused

    def upload(self, local_path, key, *, progress=None):
        if self.refused in key:
            from trainvisor.uploaders.base import UploadError

            raise UploadError(f"upload of {key}: refused by the test's store", retryable=False)
        return super().upload(local_path, key, progress=progress)


def test_a_skipped_set_stays_on_disk_while_a_newer_one_it_was_skipped_for_has_failed(tmp_path):
    """--keep-last 2 --delete-after-upload: step 2 is skipped for steps 3 and 4 (handed over
    while step 1 uploads); step 3 then fails for good, step 4 is verified. Step 2 is in no store,
    and the policy over what is verified (1, 4, and it) keeps it: its files stay. Deleting them
    because a newer set (4) was verified would lose a checkpoint that has no verified copy."""
    store = RefusingStore(str(tmp_path / "store"), "model_step_3")
    folder = tmp_path / "ckpt"
    with UploadManager(store, run_dir=str(tmp_path / "run"), run_id="r1", concurrency=1,
                       retention=RetentionPolicy.of(2, None, None), delete_after_upload=True) as m:
        futures = [m.submit(_snapshot(folder, 1))]
        assert store.started.wait(30)
        futures += [m.submit(_snapshot(folder, step)) for step in (2, 3, 4)]
        store.go.set()
        m.drain(60)
        m.prune(wait=5)
    assert _outcomes(futures) == {VERIFIED: {1, 4}, SKIPPED: {2}, "failed": {3}}
    assert (folder / "model_step_2.pt").exists()  # skipped, never stored: kept while the policy keeps it
    assert (folder / "model_step_3.pt").exists()  # failed: kept for a later upload
    assert (folder / "model_step_4.pt").exists()  # the newest verified: the one to resume from
