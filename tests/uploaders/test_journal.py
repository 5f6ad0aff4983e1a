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


def test_states_list_every_key_by_outcome_and_a_set_is_pending_until_its_manifest_is_verified(tmp_path):
    from trainvisor.events import Checkpoint, CheckpointFile

    j = Journal(str(tmp_path))
    cp = Checkpoint("s", (CheckpointFile("/x/a", "a"),), None, None, "/x")
    j.add_set("s.manifest.json", cp)
    for key in ("a", "b", "c", "d"):
        j.queue(key, f"/x/{key}", size=1, mtime_ns=1)
    j.start("b")
    j.verified("a", "sha256:aa")
    j.failed("c", "403")
    j.gone("e", "/x/e", "file gone")
    states = j.states()
    assert (states.verified, states.pending, states.failed) == (
        ("a",), ("b", "d", "s.manifest.json"), ("c", "e"))
    j.queue("s.manifest.json", "/run/.s.manifest.json", size=1, mtime_ns=1)
    j.verified("s.manifest.json", "sha256:ss")   # verified, set_done not yet recorded
    assert "s.manifest.json" not in j.states().pending
    assert j.states(["a", "d", "zzz"]) == type(states)(verified=("a",), pending=("d",), failed=())
    j.close()
