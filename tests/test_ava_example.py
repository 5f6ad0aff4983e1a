"""The AVA SDK's Caffe example (tests/ava_examples/caffe_training.py: `startproc` a Caffe,
`logproc` with the monitor and epoch-end callbacks, `wait`, `done`), unchanged but for its import
lines, run as a script in an AVA workspace: its metrics are the Caffe parser's for the same log,
and every epoch's snapshot lands in the store, to a file:// store and to Kodo through the qiniu SDK."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from trainvisor.sinks.jsonl import read_jsonl

from .conftest import FAKE_CAFFE, ROOT, real_logs

SCRIPT = Path(__file__).parent / "ava_examples" / "caffe_training.py"
LOG_NAME = "bearpaw-fork-mnist.log"
EPOCHS = range(1, 11)  # snapshots every 1000 iterations up to 10000; batch_of_epoch 1000
SNAPSHOT_BYTES = 100


def _workspace(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The AVA workspace (params/default.json naming the fake Caffe and its solver), the script's
    working directory (where the training writes its snapshots), and the log it plays."""
    log = real_logs("caffe") / LOG_NAME
    ws, cwd = tmp_path / "workspace", tmp_path / "job"
    (ws / "params").mkdir(parents=True)
    cwd.mkdir()
    (cwd / "lenet_solver.prototxt").write_text('net: "lenet_train_test.prototxt"\n')
    command = [sys.executable, str(FAKE_CAFFE), "train", "--log", str(log), "--rate", "0",
               "--snapshot-size", str(SNAPSHOT_BYTES)]
    (ws / "params" / "default.json").write_text(json.dumps(
        {"solver": "lenet_solver.prototxt", "train": {"batch_of_epoch": 1000, "command": command}}))
    return ws, cwd, log


def _run_example(ws: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "AVA_WORKSPACE": str(ws), "AVA_TRAINING_INS_ID": "job-1",
            "LANG": "C.UTF-8", "TZ": "UTC", **env}
    for name in ("TRAINVISOR_UPLOAD_TO", "QINIU_BUCKET", "TRAINVISOR_CONFIG"):  # only what the test sets
        if name not in env:
            full.pop(name, None)
    return subprocess.run([sys.executable, str(SCRIPT)], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=120)


def _assert_metrics_are_the_logs(ws: Path, log: Path) -> None:
    """The monitor's records are the Caffe parser's for the same bytes, and they hold the values
    Caffe's own parse_log.py read from the log."""
    got = read_jsonl(ws / "run" / "job-1" / "metrics.jsonl")
    from trainvisor import replay

    want = [e for e in replay(str(log), parser="caffe").events if hasattr(e, "value")]
    assert [m.without_wall_time() for m in got] == [m.without_wall_time() for m in want]
    train_loss = {m.iteration: m.value for m in got if m.phase == "train" and m.name == "loss"}
    test_acc = {m.iteration: m.value for m in got if m.phase == "test" and m.name == "accuracy"}
    with open(str(log) + ".train.csv", newline="") as fh:
        ref_train = {int(float(r["NumIters"])): float(r["loss"]) for r in csv.DictReader(fh)}
    with open(str(log) + ".test.csv", newline="") as fh:
        ref_test = {int(float(r["NumIters"])): float(r["accuracy"]) for r in csv.DictReader(fh)}
    assert train_loss == ref_train and len(ref_train) == 100
    assert test_acc == ref_test and test_acc[500] == 0.978


def test_the_doc_example_reports_the_metrics_and_stores_every_epoch_in_a_file_store(tmp_path):
    ws, cwd, log = _workspace(tmp_path)
    store = tmp_path / "store"
    done = _run_example(ws, cwd, TRAINVISOR_UPLOAD_TO=store.as_uri())
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_metrics_are_the_logs(ws, log)
    for epoch in EPOCHS:
        folder = store / "job-1" / f"epoch_{epoch}"
        names = sorted(p.name for p in folder.iterdir())
        assert names == [f"lenet_iter_{epoch * 1000}.caffemodel", f"lenet_iter_{epoch * 1000}.solverstate",
                         "lenet_solver.prototxt"]
        assert (folder / f"lenet_iter_{epoch * 1000}.caffemodel").stat().st_size == SNAPSHOT_BYTES
        manifest = json.loads((store / "job-1" / f"snapshot-model-epoch_{epoch}.manifest.json").read_text())
        assert manifest["epoch"] == epoch and manifest["iteration"] == epoch * 1000
    # Verified sets' snapshot files are removed (as AVA did after uploading); the solver, an
    # `other_files` entry, is the user's and stays.
    assert list((cwd / "examples" / "mnist").iterdir()) == []
    assert (cwd / "lenet_solver.prototxt").exists()
    status = json.loads((ws / "run" / "job-1" / "instance.json").read_text())
    assert status["status"] == "done" and status["errMsg"] == ""


def test_the_doc_example_stores_every_epoch_in_kodo_through_the_qiniu_sdk(tmp_path, kodo, monkeypatch):
    """No TRAINVISOR_UPLOAD_TO: Qiniu keys and a bucket are configured, so the snapshots go to Kodo,
    under the prefix the original used."""
    ws, cwd, log = _workspace(tmp_path)
    done = _run_example(ws, cwd, QINIU_BUCKET="ckpt")
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_metrics_are_the_logs(ws, log)
    keys = kodo.keys("ckpt")
    for epoch in EPOCHS:
        base = f"ava/default/models/job-1/epoch_{epoch}/lenet_iter_{epoch * 1000}"
        assert len(kodo.read_object("ckpt", base + ".caffemodel")) == SNAPSHOT_BYTES
        assert base + ".solverstate" in keys
        assert f"ava/default/models/job-1/snapshot-model-epoch_{epoch}.manifest.json" in keys
    # 3 files and a manifest per epoch, and the set `logs` (the script's run.log), as the original
    # uploaded the logs at done(); the probe object deleted
    assert sorted(k for k in keys if "/epoch_" not in k and "/snapshot-model-" not in k) == [
        "ava/default/models/job-1/logs.manifest.json", "ava/default/models/job-1/logs/run.log"]
    assert len(keys) == 4 * len(EPOCHS) + 2
    assert b"Finished proc with code 0" in kodo.read_object("ckpt", "ava/default/models/job-1/logs/run.log")


def test_the_callbacks_are_line_hooks_of_a_run_too(tmp_path, monkeypatch):
    """Moving from `cmd.logproc` to trainvisor's `Run`: the same callbacks as `hooks=[...]` (they
    take LineRecords). The log here ends on the epoch-1 snapshot's lines (the real log cut there),
    which a Run's hooks are never told is whole: `done()` submits it."""
    from trainvisor import Run, RunConfig, replay
    from trainvisor.compat.ava.train.base import TrainInstance
    from trainvisor.config import RunDirConfig, WatchConfig

    ws, cwd, full_log = _workspace(tmp_path)
    log = tmp_path / "cut.log"
    log.write_text("".join(full_log.read_text().splitlines(keepends=True)[:534]))
    assert log.read_text().endswith("Snapshotting solver state to examples/mnist/lenet_iter_1000.solverstate\n")
    monkeypatch.chdir(cwd)
    store = tmp_path / "store"
    ins = TrainInstance("job-1", env={"AVA_WORKSPACE": str(ws), "TRAINVISOR_UPLOAD_TO": store.as_uri()},
                        log_to_file=False)
    hooks = [ins.get_monitor_callback("caffe"), ins.get_epoch_end_callback("caffe", batch_of_epoch=1000)]
    command = (sys.executable, str(FAKE_CAFFE), "train", "--log", str(log), "--rate", "0",
               "--snapshot-size", str(SNAPSHOT_BYTES))
    summary = Run(RunConfig(command=command, run=RunDirConfig(dir=str(tmp_path / "run")),
                            watch=WatchConfig(announced=False, solver_watch=False)), hooks=hooks).run()
    assert summary.exit_code == 0 and not store.exists()  # nothing submitted before done()
    report = ins.done(timeout=60)
    assert report.sets.verified == ("job-1/snapshot-model-epoch_1.manifest.json",)
    assert (store / "job-1" / "epoch_1" / "lenet_iter_1000.solverstate").stat().st_size == SNAPSHOT_BYTES
    got = read_jsonl(ws / "run" / "job-1" / "metrics.jsonl")
    want = [e for e in replay(str(log), parser="caffe").events if hasattr(e, "value")]
    assert [m.without_wall_time() for m in got] == [m.without_wall_time() for m in want]
    assert [(m.iteration, m.value) for m in got if m.name == "loss" and m.phase == "train"][-1] == (900, 0.212657)
