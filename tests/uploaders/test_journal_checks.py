"""The journal checked when opened (integrity, schema version, owner), set aside for a rebuild;
what a restart reconciles it with (checkpoints.jsonl, the store); the store's debris swept."""
from __future__ import annotations

import json
import os
import sqlite3

import boto3
import pytest

from trainvisor.events import Checkpoint, CheckpointFile
from trainvisor.uploaders.journal import (QUEUED, SCHEMA_VERSION, UPLOADING, VERIFIED, Journal, JournalError,
                                          JournalOwner)
from trainvisor.uploaders.local import LocalUploader
from trainvisor.uploaders.reconcile import plan_resume, read_checkpoint_record

OWNER = JournalOwner("r1", "s3://ckpt/b")


def test_a_new_journal_records_its_version_and_owner_and_reopens(tmp_path):
    Journal(str(tmp_path), owner=OWNER).close()
    db = sqlite3.connect(tmp_path / "uploads.sqlite")
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert dict(db.execute("SELECT name, value FROM owner")) == {"run_id": "r1", "store": "s3://ckpt/b"}
    finally:
        db.close()
    Journal(str(tmp_path), owner=OWNER).close()


@pytest.mark.parametrize("other, named", [(JournalOwner("r2", "s3://ckpt/b"), "not to run r2 uploading to s3://ckpt/b"),
                                          (JournalOwner("r1", "file:///x"), "not to run r1 uploading to file:///x")])
def test_another_runs_or_stores_journal_is_refused_in_one_line(tmp_path, other, named):
    Journal(str(tmp_path), owner=OWNER).close()
    with pytest.raises(JournalError) as err:
        Journal(str(tmp_path), owner=other)
    message = str(err.value)
    assert "\n" not in message and "belongs to run r1 uploading to s3://ckpt/b" in message and named in message
    assert message.endswith("run `trainvisor resume RUN_DIR --rebuild-journal` to set it aside and rebuild it")
    assert err.value.exit_code == 3


def test_garbage_is_damaged_not_a_traceback_and_a_newer_schema_is_refused(tmp_path):
    (tmp_path / "uploads.sqlite").write_bytes(b"\x13" * 4096)
    with pytest.raises(JournalError, match=r"uploads.sqlite is damaged \(file is not a database\): run `trainvisor"):
        Journal(str(tmp_path))
    newer = tmp_path / "newer"
    newer.mkdir()
    db = sqlite3.connect(newer / "uploads.sqlite")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(JournalError, match=f"written by a newer trainvisor \\(schema {SCHEMA_VERSION + 1}, this one"):
        Journal(str(newer))


def test_a_journal_set_aside_is_kept_whole_and_the_next_one_starts_empty(tmp_path):
    j = Journal(str(tmp_path), owner=OWNER)
    j.queue("a", "/x/a", size=1, mtime_ns=1)  # in the WAL: moved with it
    aside = Journal.set_aside(str(tmp_path), clock=lambda: 86400.0)
    j.close()
    assert aside == tmp_path / "uploads.sqlite.set-aside-19700102T000000Z"
    old = sqlite3.connect(aside)
    try:
        assert old.execute("SELECT key FROM files").fetchall() == [("a",)]
    finally:
        old.close()
    fresh = Journal(str(tmp_path), owner=JournalOwner("r9", "file:///y"))  # no owner any more
    assert fresh.get("a") is None
    fresh.close()
    assert Journal.set_aside(str(tmp_path / "none")) is None


def _set(tmp_path, name: str) -> Checkpoint:
    path = tmp_path / f"{name}.bin"
    path.write_bytes(name.encode() * 100)
    return Checkpoint(name=name, files=(CheckpointFile(str(path), f"{name}.bin"),), iteration=1, epoch=None,
                      root=str(tmp_path))


def test_the_restart_plan_takes_recorded_sets_not_verified_and_asks_the_store_first(tmp_path):
    a, b, c = (_set(tmp_path, n) for n in "abc")
    j = Journal(str(tmp_path / "run"))
    for cp, state in ((a, VERIFIED), (b, QUEUED)):
        j.add_set(cp.name, cp)
        j.set_done(cp.name, state)
    j.queue("b.bin", b.files[0].path, size=100, mtime_ns=os.stat(b.files[0].path).st_mtime_ns)
    os.unlink(c.files[0].path)
    plan = plan_resume(j, [a, b, c], set_key=lambda cp: cp.name, key_for=lambda rel: rel)
    assert [cp.name for cp in plan.submit] == ["b"]
    assert [(cp.name, gone) for cp, gone in plan.gone] == [("c", (c.files[0].path,))]
    assert j.get("b.bin").state == UPLOADING  # queued: maybe sent before the kill, so asked first
    assert j.get("a.bin") is None  # verified sets are not looked at again
    j.close()


def test_a_line_cut_by_a_kill_is_skipped_from_the_checkpoint_record(tmp_path):
    cp = _set(tmp_path, "a")
    from trainvisor.watch.record import CheckpointRecord

    CheckpointRecord(tmp_path / "checkpoints.jsonl").submit(cp)
    with open(tmp_path / "checkpoints.jsonl", "a") as fh:
        fh.write(json.dumps({"event": "checkpoint_complete", "name": "b"})[:20])
    assert read_checkpoint_record(str(tmp_path / "checkpoints.jsonl")) == [cp]
    assert read_checkpoint_record(str(tmp_path / "absent.jsonl")) == []


def test_the_file_store_tells_whether_it_holds_exactly_a_file(tmp_path):
    up = LocalUploader(str(tmp_path / "store"))
    src = tmp_path / "w.bin"
    src.write_bytes(b"weights" * 1000)
    assert up.stored(str(src), "r1/w.bin") is None
    done = up.upload(str(src), "r1/w.bin")
    assert up.stored(str(src), "r1/w.bin") == done
    src.write_bytes(b"Weights" * 1000)  # same size, other bytes
    assert up.stored(str(src), "r1/w.bin") is None


def test_open_uploads_no_record_owns_are_aborted_and_a_recorded_one_kept(moto, tmp_path):
    from trainvisor.uploaders.s3 import S3Uploader

    s3 = boto3.client("s3", endpoint_url=moto)
    s3.create_bucket(Bucket="sweep")
    up = S3Uploader("sweep", url="s3://sweep/b", endpoint_url=moto, state_dir=str(tmp_path / "run"))
    orphan = s3.create_multipart_upload(Bucket="sweep", Key="b/r1/a.bin")["UploadId"]
    s3.create_multipart_upload(Bucket="sweep", Key="b/r2/other-run.bin")
    owned = s3.create_multipart_upload(Bucket="sweep", Key="b/r1/c.bin")["UploadId"]
    up._records.put("b/r1/c.bin", {"upload_id": owned, "version": ["sweep", 1, 1, 8 << 20]})
    assert up.abort_unowned("b/r1/") == ["b/r1/a.bin"]
    still = {u["Key"]: u["UploadId"] for u in s3.list_multipart_uploads(Bucket="sweep")["Uploads"]}
    assert still.keys() == {"b/r2/other-run.bin", "b/r1/c.bin"} and still["b/r1/c.bin"] == owned
    assert orphan not in still.values()


def test_a_new_multipart_upload_first_aborts_the_unrecorded_ones_of_its_key(moto, tmp_path):
    """A killed attempt created an upload and died before recording it: the next one aborts it
    (and only uploads of exactly this key) before it creates its own."""
    from trainvisor.uploaders.s3 import S3Uploader

    s3 = boto3.client("s3", endpoint_url=moto)
    s3.create_bucket(Bucket="again")
    src = tmp_path / "big.caffemodel"
    src.write_bytes(os.urandom(9 << 20))
    s3.create_multipart_upload(Bucket="again", Key="b/r1/big.caffemodel")
    longer = s3.create_multipart_upload(Bucket="again", Key="b/r1/big.caffemodel.2")["UploadId"]
    up = S3Uploader("again", url="s3://again/b", endpoint_url=moto, state_dir=str(tmp_path / "run"))
    obj = up.upload(str(src), "b/r1/big.caffemodel")
    assert obj.checksum.endswith("-2")
    assert [(u["Key"], u["UploadId"]) for u in s3.list_multipart_uploads(Bucket="again")["Uploads"]] == [
        ("b/r1/big.caffemodel.2", longer)]


def test_an_upload_created_twice_after_a_lost_reply_is_aborted_when_the_run_ends(moto, tmp_path, caplog):
    """CreateMultipartUpload's reply is lost (read timeout) and botocore creates another: the first
    one belongs to nobody. When every set is verified, closing the manager aborts it (logged)."""
    from botocore.config import Config

    from tests.faultproxy import FaultProxy, HoldReply
    from trainvisor.uploaders.destinations import RUN_KEYS
    from trainvisor.uploaders.manager import UploadManager
    from trainvisor.uploaders.s3 import S3Uploader

    s3 = boto3.client("s3", endpoint_url=moto)
    s3.create_bucket(Bucket="twice")
    src = tmp_path / "big.caffemodel"
    src.write_bytes(os.urandom(9 << 20))
    with FaultProxy(moto) as proxy:
        up = S3Uploader("twice", url="s3://twice/b", endpoint_url=proxy.url, state_dir=str(tmp_path / "run"))
        up._client = boto3.client("s3", endpoint_url=proxy.url, config=Config(
            read_timeout=1, retries={"max_attempts": 3, "mode": "standard"}))
        proxy.inject("POST", r"big\.caffemodel$", HoldReply(3), query_regex=r"(^|&)uploads(=|&|$)")
        with UploadManager(up, run_dir=str(tmp_path / "run"), run_id="r1", prefix="b", key_template=RUN_KEYS,
                           manifests=False) as m:
            m.submit(Checkpoint(name="big", files=(CheckpointFile(str(src), "big.caffemodel"),), iteration=1,
                                epoch=None, root=str(tmp_path)))
            assert m.drain(60).verified == ("b/r1/big.caffemodel",)
            assert len(s3.list_multipart_uploads(Bucket="twice").get("Uploads", [])) == 1  # the first one
        assert proxy.count("POST", r"(^|&)uploads(=|&|$)", status=200) == 2
    assert s3.list_multipart_uploads(Bucket="twice").get("Uploads", []) == []
    assert "aborted an open multipart upload of b/r1/big.caffemodel that no journal entry owned" in caplog.text


def test_the_owner_is_the_store_however_its_url_is_written():
    assert JournalOwner.of("r1", "s3://ckpt/call/") == JournalOwner.of("r1", "s3://ckpt/call") == JournalOwner(
        "r1", "s3://ckpt")
    assert JournalOwner.of("r1", "kodo://b/p?up_host=http://127.0.0.1:9") == JournalOwner("r1", "kodo://b")
    assert JournalOwner.of("r1", "file:///srv/store/").store == "file:///srv/store"
    assert JournalOwner.of("", "LocalUploader") == JournalOwner("", "LocalUploader")
