"""Remote retention against real stores (issue 24): `trainvisor run` of a fake Caffe writing 12
snapshot sets (a test every 10 iterations, as often as the snapshots) with `--keep-last 2
--keep-best 1 --best-by 'accuracy max'`, uploading to the moto S3 server, the Kodo-protocol
test server and file://. What the store must keep is worked out from the run's own records
(metrics.jsonl: the test accuracies; checkpoints.jsonl: the sets), not written down here.
A log whose accuracy collapses at iteration 65 has its best set in the middle (3 sets kept);
a rising one has it last (2 kept). Objects under the prefix that trainvisor did not write stay.
And a SIGKILL while a deletion is under way, on each of the three stores: the restarted run (or
`trainvisor resume`) finishes it, deleting nothing else."""
from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import boto3
import pytest

from fixtures.caffe_log import generate_caffe_log
from tests.conftest import FAKE_CAFFE, s3_env
from tests.faultproxy import FaultProxy, HoldReply
from tests.killed_runs import journal_pairs, recorded
from tests.test_process_tree import wait_for

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
RETENTION = ["--keep-last", "2", "--keep-best", "1", "--best-by", "accuracy max"]
FOREIGN = {"b/r1/notes.txt": b"not trainvisor's", "b/keep-me.bin": b"beside the run"}
Held = Callable[[], bool]


def _log(path: Path, *, collapse: bool) -> Path:
    path.write_text("".join(generate_caffe_log(max_iter=120, display=10, test_interval=10, snapshot=10,
                                               diverge_at=65 if collapse else None)))
    return path


def _argv(work: Path, url: str, log: Path, *training: str, options: tuple[str, ...] = ()) -> list[str]:
    return TRAINVISOR + ["run", "--run-dir", str(work / "run"), "--run-id", "r1", "--watch", str(work / "snap"),
                         "--upload-to", url, "--drain-timeout", "60", *RETENTION, *options, "--",
                         sys.executable, str(FAKE_CAFFE), "train", str(log), "--snapshot-dir", str(work / "snap"),
                         *training]


def _workdir(tmp_path: Path) -> Path:
    """The training's folder, its snapshot folder made beforehand: the watcher sees the first
    snapshot even when it is written before a new subfolder's watch would be in place."""
    work = tmp_path / "w"
    (work / "snap" / "examples" / "mnist").mkdir(parents=True)
    return work


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _kept_by_the_policy(work: Path) -> set[str]:
    """The 2 newest sets and the one whose test accuracy (the record at or before its iteration)
    is best, a tie going to the newer, from what the run recorded."""
    tests = {r["iteration"]: r["value"] for r in _records(work / "run" / "metrics.jsonl")
             if r.get("phase") == "test" and r.get("name") == "accuracy"}
    sets = {r["iteration"]: r["name"] for r in _records(work / "run" / "checkpoints.jsonl")}
    assert len(sets) == 12 and len(tests) == 13

    def value(it: int) -> float:
        return tests[max(k for k in tests if k <= it)]

    best = max(sets, key=lambda it: (value(it), it))
    return {sets[it] for it in sorted(sets)[-2:]} | {sets[best]}


def _expected_objects(work: Path, names: set[str]) -> dict[str, bytes]:
    out = dict(FOREIGN)
    for name in names:
        for ext in ("caffemodel", "solverstate"):
            out[f"b/r1/examples/mnist/{name}.{ext}"] = (work / "snap" / "examples" / "mnist" / f"{name}.{ext}").read_bytes()
    return out


class _Folder:
    def __init__(self, root: Path) -> None:
        self.root, self.url, self.env = root, f"file://{root}/b", None

    def put(self, key: str, data: bytes) -> None:
        (self.root / key).parent.mkdir(parents=True, exist_ok=True)
        (self.root / key).write_bytes(data)

    def objects(self) -> dict[str, bytes]:
        return {p.relative_to(self.root).as_posix(): p.read_bytes() for p in self.root.rglob("*") if p.is_file()}

    def cut_first_deletion(self, stack: contextlib.ExitStack, work: Path, log: Path) -> tuple[list[str], Held]:
        """No server here to hold a reply: the store itself stops the deletion, part way. A first
        attempt crashes after its second set (fake Caffe's --crash-after-snapshots 2): both
        uploaded, nothing deleted (two sets are within the policy). In the store, the first
        object the first set's manifest lists (the one a deletion takes after the manifest) is
        then replaced by a non-empty folder of that name, which no unlink removes (root's
        neither). The training resumed from the second set's solver state (as `caffe train
        -snapshot`), retention deletes the first set once the third is verified: its manifest
        goes, that object does not, nor the next, and the deletion stays `deleting` (each later
        pass tries it again, in vain) while the later sets are deleted as usual. Killed once all
        that is settled, and the file put back (`release`), the store and the journal are as a
        kill between the manifest's deletion and the next one leaves them."""
        first = subprocess.run(_argv(work, self.url, log, "--crash-after-snapshots", "2"), cwd=work,
                               capture_output=True, text=True, timeout=120)
        assert first.returncode == 1, first.stderr[-3000:]
        victim, second = recorded(work)
        self._blocked = self.root / _set_objects(work, victim)[0]
        self._saved = self._blocked.read_bytes()
        self._blocked.unlink()
        self._blocked.mkdir()
        (self._blocked / "in-the-way").write_bytes(b"not an object")

        def held() -> bool:  # asked once the 12 sets and 13 tests are recorded
            deleted = set(recorded(work)) - _kept_by_the_policy(work) - {victim} - _skipped(work)
            return _deletions(work) == {victim: "deleting", **dict.fromkeys(deleted, "deleted")}
        return ["-snapshot", str(work / "snap" / "examples" / "mnist" / f"{second}.solverstate")], held

    def release(self) -> None:
        assert self._blocked.is_dir()  # what the deletion could not remove
        shutil.rmtree(self._blocked)
        self._blocked.write_bytes(self._saved)


class _S3:
    def __init__(self, endpoint: str, bucket: str, tmp_path: Path) -> None:
        self.client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test",
                                   aws_secret_access_key="test", region_name="us-east-1")
        self.client.create_bucket(Bucket=bucket)
        self.bucket, self.url, self.env = bucket, f"s3://{bucket}/b", s3_env(endpoint, tmp_path)
        self._endpoint, self._tmp = endpoint, tmp_path

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def objects(self) -> dict[str, bytes]:
        listed = self.client.list_objects_v2(Bucket=self.bucket).get("Contents", [])
        return {o["Key"]: self.client.get_object(Bucket=self.bucket, Key=o["Key"])["Body"].read() for o in listed}

    def cut_first_deletion(self, stack: contextlib.ExitStack, work: Path, log: Path) -> tuple[list[str], Held]:
        """Every request through the fault proxy: the first DELETE of the run's objects reaches the
        store (the set's manifest goes), its reply is held."""
        self._proxy = stack.enter_context(FaultProxy(self._endpoint))
        self._proxy.inject("DELETE", rf"^/{self.bucket}/b/r1/", HoldReply(600))
        self.env = s3_env(self._proxy.url, self._tmp)
        return [], lambda: self._proxy.holding >= 1

    def release(self) -> None:
        self._proxy.clear_faults()


class _Kodo:
    def __init__(self, server, tmp_path: Path) -> None:
        from trainvisor.uploaders import open_uploader

        self.server, self.url, self.env, self._tmp = server, "kodo://ckpt/b", None, tmp_path
        self._up = open_uploader("kodo://ckpt")

    def put(self, key: str, data: bytes) -> None:
        path = self._tmp / "foreign.bin"
        path.write_bytes(data)
        self._up.upload(str(path), key)

    def objects(self) -> dict[str, bytes]:
        return {k: self.server.read_object("ckpt", k) for k in self.server.keys("ckpt")}

    def cut_first_deletion(self, stack: contextlib.ExitStack, work: Path, log: Path) -> tuple[list[str], Held]:
        """The rs host (where the SDK deletes and stats) behind the fault proxy, the up host not:
        the first deletion of the run's objects reaches the server (the set's manifest goes), its
        reply is held, and so is any other's (the SDK sends a request again after 30 s without a
        reply: its retry must not be answered either). A deletion's path holds `bucket:key` in
        urlsafe base64, three bytes to four characters: every key under b/r1/ begins with the 12
        of `ckpt:b/r1` (the preflight's probe, under b/, does not)."""
        self._proxy = stack.enter_context(FaultProxy(self.server.url))
        entry = base64.urlsafe_b64encode(b"ckpt:b/r1").decode()
        self._proxy.inject("POST", rf"^/delete/{re.escape(entry)}", HoldReply(600), times=100)
        self.env = {**os.environ, "QINIU_RS_HOST": self._proxy.url}
        return [], lambda: self._proxy.holding >= 1

    def release(self) -> None:
        self._proxy.clear_faults()


@pytest.fixture(params=["file", "s3", "kodo"])
def store(request, tmp_path, moto_module_endpoint):  # one moto server for the module, started first
    if request.param == "file":
        return _Folder(tmp_path / "store")
    if request.param == "s3":
        return _S3(moto_module_endpoint, f"keep-{request.node.callspec.id.replace('-', '').lower()}", tmp_path)
    return _Kodo(request.getfixturevalue("kodo"), tmp_path)


@pytest.mark.parametrize("collapse", [True, False], ids=["best-in-the-middle", "best-last"])
def test_twelve_sets_leave_the_newest_two_and_the_best_with_their_manifests(store, tmp_path, collapse):
    work = _workdir(tmp_path)
    for key, data in FOREIGN.items():
        store.put(key, data)
    done = subprocess.run(_argv(work, store.url, _log(work / "train.log", collapse=collapse), options=("--summary",)),
                          cwd=work, env=store.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    kept = _kept_by_the_policy(work)
    assert len(kept) == (3 if collapse else 2)
    objects = store.objects()
    manifests = {k: json.loads(v) for k, v in objects.items() if k.endswith(".manifest.json")}
    assert sorted(m["name"] for m in manifests.values()) == sorted(kept)
    assert {k: v for k, v in objects.items() if not k.endswith(".manifest.json")} == _expected_objects(work, kept)
    uploads = json.loads((work / "run" / "summary.json").read_text())["uploads"]
    # A set that retention would delete as soon as it is verified is skipped instead when it is
    # still queued behind newer ones (never sent): each set is one or the other, and every
    # verified set the policy does not keep was deleted.
    assert uploads["sets_verified"] + uploads["sets_skipped"] == 12 and uploads["sets_failed"] == 0
    deleted = uploads["deleted"]
    assert len(deleted) == uploads["sets_verified"] - len(kept) and not kept & set(deleted)
    assert f"  deleted from store {len(deleted)} set(s): {', '.join(deleted)}\n" in done.stderr


def _set_objects(work: Path, name: str) -> list[str]:
    """A set's objects (under the store's root) in the order its manifest lists them, the order
    a deletion takes them in after the manifest, from the run's own copy of that manifest."""
    manifest = json.loads((work / "run" / f".{name}.manifest.json").read_text())
    return [f"b/r1/{entry['relpath']}" for entry in manifest["files"]]


def _deletions(work: Path) -> dict[str, str]:
    return journal_pairs(work, "SELECT name, state FROM deletions")


def _skipped(work: Path) -> set[str]:
    """The sets retention skipped, never sent (it would have deleted them at once): never deleted."""
    return {json.loads(cp)["name"] for cp, state in journal_pairs(work, "SELECT checkpoint, state FROM sets").items()
            if state == "skipped"}


def _tests_recorded(work: Path) -> int:
    try:
        text = (work / "run" / "metrics.jsonl").read_text()
    except FileNotFoundError:
        return 0
    return sum('"phase": "test"' in line and '"name": "accuracy"' in line for line in text.splitlines())


@pytest.mark.parametrize("restart", ["run", "resume"])
def test_a_deletion_cut_by_sigkill_is_finished_by_the_restart_and_nothing_else_is_deleted(store, tmp_path, restart):
    """The first set retention deletes loses its manifest (deleted first) and nothing else when
    trainvisor is SIGKILLed, the deletion journaled `deleting`: on S3 and Kodo the first deletion
    request reaches the store and its reply is held; on file:// the store refuses the set's next
    object (each store's `cut_first_deletion` says how). The restart on the same run directory
    (the training again, or `trainvisor resume`) deletes the rest of that set, and the store ends
    as a whole run would have left it."""
    for key, data in FOREIGN.items():
        store.put(key, data)
    work = _workdir(tmp_path)
    log = _log(work / "train.log", collapse=True)
    with contextlib.ExitStack() as stack:
        training, held = store.cut_first_deletion(stack, work, log)
        first = subprocess.Popen(_argv(work, store.url, log, *training, "--sleep-at-end", "60"), cwd=work,
                                 env=store.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: first.poll() is not None or (len(recorded(work)) == 12 and _tests_recorded(work) == 13
                                                          and held()),
                     60, "a deletion cut, every set and test recorded")
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(30)
        assert first.returncode == -signal.SIGKILL
        (cut,) = [name for name, state in _deletions(work).items() if state == "deleting"]
        left, objects = store.objects(), _set_objects(work, cut)
        assert f"b/r1/{cut}.manifest.json" not in left  # the deletion had begun (the manifest goes first)
        assert objects[-1] in left  # and had not ended (file://: the first is the folder in its way)
        store.release()
        assert set(objects) <= set(store.objects())
        argv = (_argv(work, store.url, log, "--no-snapshots") if restart == "run" else
                TRAINVISOR + ["resume", str(work / "run")])
        again = subprocess.run(argv, cwd=work, env=store.env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    kept = _kept_by_the_policy(work)
    assert cut not in kept and len(kept) == 3
    objects = store.objects()
    assert sorted(json.loads(v)["name"] for k, v in objects.items() if k.endswith(".manifest.json")) == sorted(kept)
    assert {k: v for k, v in objects.items() if not k.endswith(".manifest.json")} == _expected_objects(work, kept)
    assert _deletions(work) == {name: "deleted" for name in _deletions(work)} and cut in _deletions(work)
    verified = [k for k, state in journal_pairs(work, "SELECT set_key, state FROM sets").items() if state == "verified"]
    assert len(_deletions(work)) == len(verified) - len(kept)  # the rest were skipped, never sent


def test_with_delete_after_upload_only_the_newest_verified_set_stays_on_disk(tmp_path):
    store = _Folder(tmp_path / "store")
    work = _workdir(tmp_path)
    done = subprocess.run(_argv(work, store.url, _log(work / "train.log", collapse=True),
                                options=("--delete-after-upload",)),
                          cwd=work, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    sets = {r["iteration"]: r["name"] for r in _records(work / "run" / "checkpoints.jsonl")}
    newest = sets[max(sets)]
    assert sorted(p.name for p in (work / "snap" / "examples" / "mnist").iterdir()) == [
        f"{newest}.caffemodel", f"{newest}.solverstate"]
    kept = _kept_by_the_policy(work)
    assert sorted(json.loads(v)["name"] for k, v in store.objects().items() if k.endswith(".manifest.json")) == \
        sorted(kept)


@pytest.mark.parametrize("flags, said", [
    (["--keep-best", "1"], "upload.keep_best (--keep-best) needs upload.best_by (--best-by 'METRIC max|min')"),
    (["--keep-best", "1", "--best-by", "accuracy"],
     "--best-by: upload.best_by: must be 'METRIC max' or 'METRIC min' (e.g. 'val/accuracy max') (got 'accuracy')"),
    (["--keep-last", "0"], "--keep-last: upload.keep_last: must be at least 1 (got 0)"),
])
def test_a_retention_option_that_cannot_work_is_one_line_before_the_training_starts(tmp_path, flags, said):
    marker = tmp_path / "started"
    done = subprocess.run(TRAINVISOR + ["run", "--run-dir", str(tmp_path / "run"), "--upload-to",
                                        f"file://{tmp_path}/store", *flags, "--", "touch", str(marker)],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (2, f"trainvisor: {said}\n")
    assert not marker.exists()
