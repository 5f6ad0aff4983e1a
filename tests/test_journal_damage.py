"""A damaged upload journal never reads as success (issue 23). `trainvisor run` is SIGKILLed with
4 checkpoint sets complete (checkpoints.jsonl) and 2 of them in the store (the store refused the
other 2: moto S3 behind the fault proxy answering 503, or a file:// folder where their objects
cannot be written); then the journal is damaged each way a crash or a mistake can: database and
WAL emptied, garbage WAL, WAL cut in half, garbage database, another run's journal. `trainvisor
resume` and a rerun either end with all 4 sets verified in the store and no multipart upload
open, or exit non-zero with one line naming the journal and the remedy (`--rebuild-journal`),
which then ends with all 4 verified: never exit 0 with a set missing."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import boto3
import pytest

from tests.conftest import s3_env
from tests.faultproxy import FaultProxy
from tests.killed_runs import (TRAINVISOR, expected_objects, folder_objects, journal_rows, manifests,
                               open_uploads, recorded, run, run_argv, s3_objects, write_log)
from tests.test_process_tree import wait_for  # the store's counters tell nobody: they are looked at

BUCKET = "dmg"
SETS = ["lenet_iter_10", "lenet_iter_20", "lenet_iter_30", "lenet_iter_40"]
REFUSED = ("lenet_iter_30", "lenet_iter_40")


class Store:
    """One store kind: where the run uploads, what it holds, and how to put back a saved state."""

    def __init__(self, kind: str, base: Path, endpoint: str) -> None:
        self.kind, self.base = kind, base
        self.env = s3_env(endpoint, base)
        if kind == "s3":
            self.s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                                   aws_secret_access_key="test", region_name="us-east-1")
            self.s3.create_bucket(Bucket=BUCKET)
            self.to, self.prefix = f"s3://{BUCKET}/b", "b/r1"
        else:
            self.root = base / "store"
            self.to, self.prefix = f"file://{self.root}", "r1"

    def objects(self) -> dict[str, bytes]:
        return s3_objects(self.s3, BUCKET) if self.kind == "s3" else folder_objects(self.root)

    def open_uploads(self) -> list[str]:
        return open_uploads(self.s3, BUCKET) if self.kind == "s3" else []

    def restore(self, saved: dict[str, bytes]) -> None:
        if self.kind == "s3":
            for key in self.objects():
                self.s3.delete_object(Bucket=BUCKET, Key=key)
            for u in self.s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []):
                self.s3.abort_multipart_upload(Bucket=BUCKET, Key=u["Key"], UploadId=u["UploadId"])
            for key, data in saved.items():
                self.s3.put_object(Bucket=BUCKET, Key=key, Body=data)
        else:
            shutil.rmtree(self.root, ignore_errors=True)
            for key, data in saved.items():
                (self.root / key).parent.mkdir(parents=True, exist_ok=True)
                (self.root / key).write_bytes(data)


def _kill_with_two_stored(store: Store, work: Path) -> None:
    """The first attempt, SIGKILLed once all 4 sets are recorded complete, sets 1-2 are in the
    store and the store has refused sets 3-4 (retried without end)."""
    (work / "snap").mkdir(parents=True)
    log = write_log(work / "train.log")
    # 4 workers: the sets the store refuses (retried without end) hold no other set up.
    argv = run_argv(work, store.to, log, "--sleep-at-end", "60")
    argv[argv.index("--"):argv.index("--")] = ["--upload-concurrency", "4"]
    if store.kind == "s3":
        with FaultProxy(store.env["AWS_ENDPOINT_URL"]) as proxy:
            proxy.inject("PUT", r"lenet_iter_(30|40)\.", 503, times=100_000)
            env = {**store.env, "AWS_ENDPOINT_URL": proxy.url}
            first = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for(lambda: first.poll() is not None or (
                len(recorded(work)) == 4 and proxy.count("PUT", "", status=503) >= 2 and
                len(manifests(store.objects())) == 2), 60, "sets 1-2 stored and 3-4 refused")
            first.send_signal(signal.SIGKILL)
            first.wait(30)
        return
    for name in REFUSED:  # a directory where the object's temporary copy goes: every write fails
        (store.root / store.prefix / "examples/mnist" / f".{name}.caffemodel.trainvisor-tmp" / "x").mkdir(
            parents=True)
    first = subprocess.Popen(argv, cwd=work, env=store.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: first.poll() is not None or (
        len(recorded(work)) == 4 and len(manifests(store.objects())) == 2 and
        (work / "run" / "train.log").read_text().count("failed for good") >= 2), 60, "sets 1-2 stored, 3-4 failed")
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    for name in REFUSED:  # the store is writable again
        shutil.rmtree(store.root / store.prefix / "examples/mnist" / f".{name}.caffemodel.trainvisor-tmp")


def _copy(src: Path, dst: Path) -> None:
    """The run folder copied, sockets a killed process left behind (its log's) aside."""
    def sockets(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if stat.S_ISSOCK(os.lstat(os.path.join(folder, n)).st_mode)]

    shutil.copytree(src, dst, ignore=sockets)


@pytest.fixture(scope="module", params=["s3", "file"])
def killed(request, moto_module_endpoint, tmp_path_factory):
    """(store, saved run folder, saved store objects): one killed first attempt per store kind,
    put back before each test."""
    base = tmp_path_factory.mktemp(f"killed-{request.param}")
    store = Store(request.param, base, moto_module_endpoint)
    work = base / "w"
    _kill_with_two_stored(store, work)
    assert sorted(recorded(work)) == SETS
    saved_objects = store.objects()
    assert sorted(manifests(saved_objects)) == [f"{store.prefix}/lenet_iter_{i}.manifest.json" for i in (10, 20)]
    assert (work / "run" / "uploads.sqlite-wal").stat().st_size > 0  # the journal's rows are in its WAL
    _copy(work, base / "saved")
    return store, base / "saved", saved_objects


@pytest.fixture
def damaged(killed):
    store, saved, objects = killed
    work = saved.parent / "w"
    shutil.rmtree(work)
    _copy(saved, work)  # the same absolute paths: checkpoints.jsonl and the journal name them
    store.restore(objects)
    return store, work


def _emptied(db: Path) -> None:
    for p in (db, Path(f"{db}-wal")):
        p.write_bytes(b"")


def _garbage_wal(db: Path) -> None:
    wal = Path(f"{db}-wal")
    wal.write_bytes(os.urandom(wal.stat().st_size))


def _cut_wal(db: Path) -> None:
    wal = Path(f"{db}-wal")
    os.truncate(wal, wal.stat().st_size // 2)


def _garbage_db(db: Path) -> None:
    """Garbage where the database was, and no WAL (a WAL holding page 1 would make it whole again)."""
    db.write_bytes(os.urandom(8192))
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink()


def _foreign(db: Path) -> None:
    """Another run's journal (run r0, another store), with a verified row of its own: read as
    this run's, its rows would say what this run's objects are not."""
    from trainvisor.uploaders.journal import Journal, JournalOwner

    other = db.parent.parent / "other-run"
    j = Journal(str(other), owner=JournalOwner("r0", "whatever://the-other-store"))
    j.queue("r0/lenet_iter_10.caffemodel", "/elsewhere/lenet_iter_10.caffemodel", size=1, mtime_ns=1)
    j.verified("r0/lenet_iter_10.caffemodel", "sha256:00")
    j.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.copy(other / "uploads.sqlite", db)
    shutil.rmtree(other)


READABLE = {"emptied database and WAL": _emptied, "garbage WAL": _garbage_wal, "WAL cut in half": _cut_wal}
REFUSED_JOURNALS = {"garbage database": _garbage_db, "another run's journal": _foreign}


def _assert_all_verified(store: Store, work: Path) -> None:
    objects = store.objects()
    expected = expected_objects(work, store.prefix)
    assert {k: v for k, v in objects.items() if not k.endswith(".manifest.json")} == expected
    assert sorted(m["name"] for m in manifests(objects).values()) == SETS
    for m in manifests(objects).values():
        assert sorted(f["relpath"] for f in m["files"]) == [f"examples/mnist/{m['name']}.caffemodel",
                                                             f"examples/mnist/{m['name']}.solverstate"]
    assert store.open_uploads() == []
    assert set(journal_rows(work).values()) == {"verified"}


def _rerun(store: Store, work: Path) -> subprocess.CompletedProcess:
    """The training started again on the same run folder (restarted from its last checkpoint,
    it writes none of the old ones again)."""
    return run(run_argv(work, store.to, work / "train.log", "--no-snapshots"), work, store.env)


def _resume(store: Store, work: Path, *flags: str) -> subprocess.CompletedProcess:
    return run(TRAINVISOR + ["resume", str(work / "run"), *flags], work, store.env)


@pytest.mark.parametrize("how", ["resume", "rerun"])
@pytest.mark.parametrize("damage", sorted(READABLE))
def test_a_journal_that_lost_its_rows_is_reconciled_and_every_set_ends_verified(damaged, damage, how):
    store, work = damaged
    READABLE[damage](work / "run" / "uploads.sqlite")
    done = _resume(store, work) if how == "resume" else _rerun(store, work)
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_all_verified(store, work)


@pytest.mark.parametrize("how", ["resume", "rerun"])
@pytest.mark.parametrize("damage", sorted(REFUSED_JOURNALS))
def test_a_damaged_or_foreign_journal_is_one_line_then_rebuilt(damaged, damage, how):
    store, work = damaged
    db = work / "run" / "uploads.sqlite"
    REFUSED_JOURNALS[damage](db)
    before = store.objects()
    refused = _resume(store, work) if how == "resume" else _rerun(store, work)
    assert refused.returncode == 3, refused.stderr[-3000:]
    (line,) = [x for x in refused.stderr.splitlines() if "upload journal" in x]
    assert str(db) in line and "--rebuild-journal" in line and "Traceback" not in refused.stderr
    assert ("damaged" in line) if damage == "garbage database" else ("belongs to run r0" in line)
    assert store.objects() == before  # nothing was read as "nothing to do", nothing sent

    rebuilt = _resume(store, work, "--rebuild-journal")
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "4 checkpoint sets verified, 0 pending, 0 failed" in rebuilt.stderr
    _assert_all_verified(store, work)
    (aside,) = work.joinpath("run").glob("uploads.sqlite.set-aside-*[0-9TZ]")  # kept for a post-mortem
    assert aside.read_bytes()[:16] != b"SQLite format 3\x00" if damage == "garbage database" else aside.exists()


def test_resume_counts_a_set_done_only_when_the_store_holds_its_manifest(damaged):
    """The journal says verified, the store has lost a set (deleted by hand, a lifecycle rule):
    `resume` asks the store for every recorded set's manifest and uploads the lost one again."""
    store, work = damaged
    assert _resume(store, work).returncode == 0
    lost = [f"{store.prefix}/lenet_iter_10.manifest.json", f"{store.prefix}/examples/mnist/lenet_iter_10.caffemodel"]
    for key in lost:
        if store.kind == "s3":
            store.s3.delete_object(Bucket=BUCKET, Key=key)
        else:
            (store.root / key).unlink()
    again = _resume(store, work)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "4 checkpoint sets verified, 0 pending, 0 failed" in again.stderr
    _assert_all_verified(store, work)
