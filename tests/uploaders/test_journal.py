"""The upload journal: transitions survive a restart; a changed file is queued again."""
from __future__ import annotations

from trainvisor.uploaders.journal import FAILED, QUEUED, UPLOADING, VERIFIED, Journal


def test_interrupted_upload_is_unfinished_after_reopening(tmp_path):
    j = Journal(str(tmp_path))
    j.queue("a", "/x/a", size=10, mtime_ns=1)
    j.queue("b", "/x/b", size=20, mtime_ns=1)
    j.start("a")
    j.start("b")
    j.verified("b", "sha256:00")
    j.close()
    j = Journal(str(tmp_path))
    unfinished = j.unfinished()
    assert [(e.key, e.state, e.attempts) for e in unfinished] == [("a", UPLOADING, 1)]
    assert j.get("b").state == VERIFIED and j.get("b").checksum == "sha256:00"
    j.close()


def test_same_version_is_not_queued_twice_but_a_changed_file_is(tmp_path):
    j = Journal(str(tmp_path))
    assert j.queue("a", "/x/a", size=10, mtime_ns=1)
    j.start("a")
    j.verified("a", "c")
    assert not j.queue("a", "/x/a", size=10, mtime_ns=1)
    assert j.queue("a", "/x/a", size=11, mtime_ns=2)
    assert j.get("a").state == QUEUED
    j.close()


def test_retry_and_permanent_failure_keep_the_error(tmp_path):
    j = Journal(str(tmp_path))
    j.queue("a", "/x/a", size=1, mtime_ns=1)
    j.start("a")
    j.retry("a", "503 from server")
    assert j.get("a").state == QUEUED and j.get("a").last_error == "503 from server"
    j.start("a")
    j.failed("a", "bucket does not exist")
    assert j.get("a").state == FAILED and j.get("a").attempts == 2
    assert j.unfinished() == []
    j.close()
