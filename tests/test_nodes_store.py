"""One run across two nodes (issue 21): two `trainvisor run` processes of fake Caffe with
different NODE_RANK, one run id, uploading at the same time to one file:// store prefix (and to
one S3 prefix of the moto server). Nothing is overwritten (each node's objects are its own files,
byte for byte, under `node-<n>/`), each node's records say its node, `download --latest` returns
the newest set complete on both (and a restarted node resumes from its own copy of it), and a
process of local rank 1 uploads nothing (its node's rank 0 does)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainvisor.run.saved import load_saved_config
from trainvisor.run.summaryfile import read_summary

from .conftest import FAKE_CAFFE, s3_env

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
SIZES = {0: 2000, 1: 3000}  # each node's snapshot files differ in size and bytes: an overwrite shows
NEWEST = ("examples/mnist/lenet_iter_90.caffemodel", "examples/mnist/lenet_iter_90.solverstate")
OLDER = ("examples/mnist/lenet_iter_81.caffemodel", "examples/mnist/lenet_iter_81.solverstate")


def node_command(work: Path, node: int, store: str) -> list[str]:
    """Node `node`'s trainvisor around a fake Caffe of 90 iterations (a snapshot every 9)."""
    here = work / f"n{node}"
    return TRAINVISOR + ["run", "--run-dir", str(here / "run"), "--run-id", "multi", "--watch", str(here / "snap"),
                         "--upload-to", store, "--", sys.executable, str(FAKE_CAFFE), "train", "--generate", "90",
                         "--snapshot-dir", str(here / "snap"), "--snapshot-size", str(SIZES[node])]


def start_node(work: Path, node: int, store: str, **env: str) -> subprocess.Popen:
    (work / f"n{node}").mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(node_command(work, node, store), cwd=work / f"n{node}", env={**os.environ, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> None:
    try:
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-2000:]


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> Path:
    """Both nodes run at once into one store; the work folder (store/, n0/, n1/)."""
    work = tmp_path_factory.mktemp("two-nodes")
    store = f"file://{work / 'store'}"
    procs = [start_node(work, n, store, NODE_RANK=str(n)) for n in (0, 1)]
    for p in procs:
        finish(p)
    return work


def download_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(TRAINVISOR + ["download", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_nothing_is_overwritten_each_node_s_objects_are_its_own_files(two_nodes):
    run = two_nodes / "store" / "multi"
    assert sorted(p.name for p in run.iterdir()) == ["node-0", "node-1"]
    for n in (0, 1):
        snap = files_under(two_nodes / f"n{n}" / "snap")
        stored = files_under(run / f"node-{n}")
        sets = sorted(k for k in stored if k.endswith(".manifest.json"))
        assert sets == sorted(f"lenet_iter_{i}.manifest.json" for i in range(9, 91, 9))
        assert {k: v for k, v in stored.items() if k not in sets} == snap  # byte for byte, every file
        assert {len(v) for k, v in snap.items()} == {SIZES[n]}
        manifest = json.loads(stored["lenet_iter_90.manifest.json"])
        assert (manifest["run_id"], manifest["iteration"]) == ("multi", 90)
        assert sorted((f["key"], f["size"]) for f in manifest["files"]) == [
            (f"multi/node-{n}/{rel}", SIZES[n]) for rel in NEWEST]


def test_each_node_s_records_and_summary_say_its_node(two_nodes):
    for n in (0, 1):
        run_dir = two_nodes / f"n{n}" / "run"
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert records and {(r["node"], r["attempt"]) for r in records} == {(n, 1)}
        assert not any("process_rank" in r for r in records)  # NODE_RANK says the node only
        summary = read_summary(run_dir)
        assert (summary.node, summary.process_rank, summary.run_id) == (n, None, "multi")
        saved = load_saved_config(run_dir).run  # what `trainvisor resume` uploads with: the same folder
        assert (saved.node, saved.process_rank, saved.local_rank) == (n, None, None)


def test_download_latest_is_the_newest_set_complete_on_both_nodes(two_nodes, tmp_path):
    url = f"file://{two_nodes / 'store'}/multi"
    done = download_cli(url, "--latest", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"downloaded set lenet_iter_90 (2 file(s), 4.0 KB received) from {url} into " \
                          f"{tmp_path / 'out'}, verified\n"
    snap0 = two_nodes / "n0" / "snap"
    assert files_under(tmp_path / "out") == {rel: (snap0 / rel).read_bytes() for rel in NEWEST}  # the lowest node's
    mine = download_cli(url, "--node", "1", "-o", str(tmp_path / "out1"), cwd=tmp_path)
    assert mine.returncode == 0, mine.stderr
    snap1 = two_nodes / "n1" / "snap"
    assert files_under(tmp_path / "out1") == {rel: (snap1 / rel).read_bytes() for rel in NEWEST}


def test_a_set_incomplete_on_one_node_is_passed_over_for_the_older_common_one(two_nodes, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(two_nodes / "store", store)
    gone = store / "multi" / "node-1" / NEWEST[1]
    gone.unlink()
    done = download_cli(f"file://{store}/multi", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (
        f"trainvisor: passed over set lenet_iter_90: {NEWEST[1]}: missing from the store "
        f"(node-1/{NEWEST[1]})")
    assert done.stderr.splitlines()[1].startswith("downloaded set lenet_iter_81 ")
    snap0 = two_nodes / "n0" / "snap"
    assert files_under(tmp_path / "out") == {rel: (snap0 / rel).read_bytes() for rel in OLDER}
    # node 0's own newest set is whole: through its own folder it is still the newest
    own = download_cli(f"file://{store}/multi/node-0", "-o", str(tmp_path / "own"), cwd=tmp_path)
    assert own.returncode == 0 and "downloaded set lenet_iter_90 " in own.stderr, own.stderr


def test_a_process_of_local_rank_1_leaves_the_upload_to_local_rank_0(tmp_path):
    store = tmp_path / "store"
    proc = start_node(tmp_path, 0, f"file://{store}", NODE_RANK="0", LOCAL_RANK="1")
    finish(proc)
    assert not store.exists() or files_under(store) == {}
    assert len(files_under(tmp_path / "n0" / "snap")) == 20  # the training wrote its sets all the same
    summary = read_summary(tmp_path / "n0" / "run")
    assert (summary.node, summary.uploads, summary.warnings) == (0, None, ())


def test_a_set_by_name_is_the_asked_node_s_copy(two_nodes, tmp_path):
    import trainvisor

    url = f"file://{two_nodes / 'store'}/multi"
    named = ("examples/mnist/lenet_iter_45.caffemodel", "examples/mnist/lenet_iter_45.solverstate")
    for node, expect in ((None, 0), (1, 1)):
        report = trainvisor.download(url, tmp_path / f"out{node}", set_name="lenet_iter_45", node=node)
        assert report.manifest_key == f"node-{expect}/lenet_iter_45.manifest.json"  # under the URL
        snap = two_nodes / f"n{expect}" / "snap"
        assert files_under(tmp_path / f"out{node}") == {rel: (snap / rel).read_bytes() for rel in named}


def test_no_set_whole_on_every_node_is_one_line(two_nodes, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(two_nodes / "store", store)
    for state in (store / "multi" / "node-1").rglob("*.solverstate"):
        state.unlink()  # node 1 holds no whole set; node 0 all of them
    done = download_cli(f"file://{store}/multi", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (3, "")
    assert done.stderr == (f"trainvisor: no checkpoint set under file://{store}/multi is complete on every node "
                           "that wrote sets (20 found in node-0, node-1)\n")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_a_restarted_node_resumes_from_its_own_copy_of_the_set_whole_on_every_node(two_nodes, tmp_path):
    from trainvisor.run.resumepoint import find_resume_point

    store = tmp_path / "store"
    shutil.copytree(two_nodes / "store", store)
    (store / "multi" / "node-0" / NEWEST[0]).unlink()  # node 0's newest is broken: both resume from 81
    (tmp_path / "run").mkdir()
    decision = find_resume_point(tmp_path / "run", stores=(f"file://{store}/multi",), node=1)
    assert decision.point is not None and (decision.point.name, decision.point.iteration) == ("lenet_iter_81", 81)
    snap1 = two_nodes / "n1" / "snap"
    assert sorted(Path(p).read_bytes() for p in decision.point.files) == sorted(
        (snap1 / rel).read_bytes() for rel in OLDER)


def test_two_nodes_into_one_s3_prefix_keep_their_own_objects(moto_endpoint, tmp_path):
    import boto3

    env = s3_env(moto_endpoint, tmp_path)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    s3.create_bucket(Bucket="nodes-ckpt")  # its own bucket: the moto server may be shared
    procs = [start_node(tmp_path, n, "s3://nodes-ckpt/backups", **{**env, "NODE_RANK": str(n)}) for n in (0, 1)]
    for p in procs:
        finish(p)
    listed = s3.list_objects_v2(Bucket="nodes-ckpt", Prefix="backups/")["Contents"]
    stored = {o["Key"]: s3.get_object(Bucket="nodes-ckpt", Key=o["Key"])["Body"].read() for o in listed}
    for n in (0, 1):
        snap = files_under(tmp_path / f"n{n}" / "snap")
        mine = {k[len(f"backups/multi/node-{n}/"):]: v for k, v in stored.items()
                if k.startswith(f"backups/multi/node-{n}/") and not k.endswith(".manifest.json")}
        assert mine == snap
    assert len(stored) == 2 * (20 + 10)  # each node's 20 files and 10 manifests, nothing else
    done = subprocess.run(TRAINVISOR + ["download", "s3://nodes-ckpt/backups/multi", "--node", "1", "-o",
                                        str(tmp_path / "out")], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    snap1 = tmp_path / "n1" / "snap"
    assert files_under(tmp_path / "out") == {rel: (snap1 / rel).read_bytes() for rel in NEWEST}


def test_a_node_that_wrote_no_set_is_refused_not_answered_with_another_s(two_nodes, tmp_path):
    url = f"file://{two_nodes / 'store'}/multi"
    for args in (("--latest",), ("--set", "lenet_iter_45")):
        done = download_cli(url, *args, "--node", "2", "-o", str(tmp_path / "out"), cwd=tmp_path)
        assert (done.returncode, done.stdout) == (3, "")
        assert done.stderr == f"trainvisor: no set of node 2 under {url} (nodes with sets: 0, 1)\n"
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
