"""The journal's deletions (uploaders/deletions.py): a schema-1 journal adopted with the table
added; `deleting` rows are what a restart finishes; a set deleted stops being vouched for, and one
submitted again is the store's again."""
from __future__ import annotations

import sqlite3

import pytest

from trainvisor.events import Checkpoint, CheckpointFile
from trainvisor.uploaders.journal import SCHEMA_VERSION, VERIFIED, Journal, JournalOwner

OWNER = JournalOwner("r1", "file:///store")


@pytest.fixture
def journal(tmp_path):
    j = Journal(str(tmp_path), owner=OWNER)
    try:
        yield j
    finally:
        j.close()


def _set(tmp_path, name: str) -> Checkpoint:
    path = tmp_path / f"{name}.caffemodel"
    path.write_bytes(name.encode())
    return Checkpoint(name, (CheckpointFile(str(path), path.name),), 10, None, str(tmp_path), "caffe")


def _verified(j: Journal, cp: Checkpoint) -> str:
    f = cp.files[0]
    j.queue(f"b/r1/{f.relpath}", f.path, size=1, mtime_ns=1)
    j.verified(f"b/r1/{f.relpath}", "sha256:x", size=1, mtime_ns=1)
    set_key = f"b/r1/{cp.name}.manifest.json"
    j.add_set(set_key, cp)
    j.set_done(set_key, VERIFIED)
    return set_key


def test_a_schema_1_journal_is_adopted_with_its_rows_and_gains_the_deletions_table(tmp_path):
    j = Journal(str(tmp_path), owner=OWNER)
    key = _verified(j, _set(tmp_path, "lenet_iter_10"))
    j.close()
    db = sqlite3.connect(tmp_path / "uploads.sqlite")
    db.execute("DROP TABLE deletions")
    db.execute("PRAGMA user_version=1")
    db.close()
    j = Journal(str(tmp_path), owner=OWNER)
    try:
        assert [k for k, _, _ in j.retained_sets()] == [key]
        assert j.deleted_sets() == () and j.unfinished_deletions() == []
    finally:
        j.close()
    db = sqlite3.connect(tmp_path / "uploads.sqlite")
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (2,)
    finally:
        db.close()


def test_a_deletion_begun_is_unfinished_until_ended_and_the_files_are_no_longer_vouched_for(tmp_path, journal):
    cp = _set(tmp_path, "lenet_iter_10")
    key = _verified(journal, cp)
    file_key = "b/r1/lenet_iter_10.caffemodel"
    journal.begin_deletion(key, cp.name, [key, file_key])
    assert journal.unfinished_deletions() == [(key, "lenet_iter_10", (key, file_key))]
    assert journal.retained_sets() == [] and journal.is_deleted(key)
    assert journal.get(file_key).state == "deleted"
    assert journal.verified_checksum(file_key, size=1, mtime_ns=1) is None  # asked again: uploaded again
    journal.end_deletion(key)
    assert journal.unfinished_deletions() == [] and journal.deleted_sets() == ("lenet_iter_10",)
    assert journal.set_state(key) == VERIFIED  # counted verified: it was, before retention deleted it


def test_a_set_submitted_again_while_its_deletion_runs_is_not_recorded_deleted(tmp_path, journal):
    cp = _set(tmp_path, "lenet_iter_10")
    key = _verified(journal, cp)
    journal.begin_deletion(key, cp.name, [key])
    journal.add_set(key, cp)  # handed over again: its objects are uploaded again, whole
    journal.end_deletion(key)
    assert journal.deleted_sets() == () and journal.unfinished_deletions() == [] and not journal.is_deleted(key)
