"""A run never ends on a silent "nothing": checkpoints nobody announced are found where frameworks
put them by default, a destination that received nothing and an output that gave no metric are
each a warning with its remedy (run log, stderr unless -q, summary), and a parser's Notice is said
once. Live runs: one tiny real Lightning training, and small Python programs."""
from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from trainvisor.run.endwarnings import end_warnings, no_checkpoint_warning, no_metrics_warning

from .conftest import FIXTURES

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
# What changes what a program prints, fixed (Rich reads the terminal ones).
QUIET_ENV = {"COLUMNS": "80", "LINES": "24", "TERM": "dumb", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC",
             "PYTHONIOENCODING": "utf-8"}
DROPPED = ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in DROPPED and not k.startswith("LC_")}
    return {**e, **QUIET_ENV}


def trainvisor(tmp_path: Path, *flags: str, program: str) -> subprocess.CompletedProcess:
    (tmp_path / "train.py").write_text(program)
    return subprocess.run(TRAINVISOR + ["run", "--run-dir", "r", "--run-id", "r1", *flags, "--",
                                        sys.executable, "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env())


def summary_lines(stderr: str) -> list[str]:
    return stderr[stderr.index("trainvisor summary"):].splitlines()


def store_files(store: Path) -> list[str]:
    return sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())


@pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                    reason="lightning is installed by `make test` (setup.cfg extra 'frameworks')")
def test_lightnings_default_checkpoints_are_uploaded_without_watch(tmp_path):
    store = tmp_path / "store"
    # Lightning creates lightning_logs/version_0/checkpoints and saves epoch 0 in the same instant,
    # before a watch on the new folder can exist: that file is found by a scan and completes by
    # settling, and Lightning replaces it one (unhurried) epoch later: settle well within that.
    proc = subprocess.run(TRAINVISOR + ["run", "-q", "--run-dir", "r", "--run-id", "r1", "--settle", "0.3",
                                        "--upload-to", f"file://{store}", "--", sys.executable,
                                        str(FIXTURES / "programs" / "lightning_default_ckpt.py"), "2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpts = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    # The default ModelCheckpoint keeps the latest epoch only: epoch 0's was replaced by epoch 1's.
    assert [p.name for p in ckpts.iterdir()] == ["epoch=1-step=16.ckpt"]
    stored = store / "r1" / "version_0" / "checkpoints" / "epoch=1-step=16.ckpt"
    assert stored.read_bytes() == (ckpts / "epoch=1-step=16.ckpt").read_bytes()
    with sqlite3.connect(tmp_path / "r" / "uploads.sqlite") as db:
        verified = sorted(k for (k,) in db.execute(
            "SELECT key FROM files WHERE state='verified' AND key LIKE '%.ckpt'"))
    assert verified == ["r1/version_0/checkpoints/epoch=0-step=8.ckpt", "r1/version_0/checkpoints/epoch=1-step=16.ckpt"]
    log = (tmp_path / "r" / "train.log").read_text()
    assert (f"no --watch directory; watching the default checkpoint locations {tmp_path}/lightning_logs (with "
            f"subdirectories), {tmp_path}/checkpoints (with subdirectories), {tmp_path}/trainer_output (with "
            f"subdirectories), {tmp_path} (its own files only), and the directories the training's log announces "
            f"checkpoints in") in log
    assert "INFO trainvisor: 2 of 2 checkpoint sets verified\n" in log
    assert "no checkpoint was found" not in log
    # The one warning is the Lightning parser's: its default Rich bar, piped, printed the last epoch only.
    assert [line.split(" WARNING trainvisor: ")[1].split(":")[0] for line in log.splitlines() if " WARNING " in line] \
        == ["Lightning's Rich progress bar printed only the last epoch's values (through a pipe it draws no other epoch)"]
    assert proc.stderr.count("trainvisor:") == 0


SAVES_ELSEWHERE = """
import os
os.makedirs('saved/weights', exist_ok=True)
for step in (1, 2, 3):
    print(f'step {step} loss={1 / step:.4f}', flush=True)
    with open(f'saved/weights/model-{step}.pt', 'wb') as fh:
        fh.write(os.urandom(2048))
"""


def test_checkpoints_saved_where_nothing_watches_end_with_a_warning_naming_watch(tmp_path):
    store = tmp_path / "store"
    proc = trainvisor(tmp_path, "--summary", "--upload-to", f"file://{store}", program=SAVES_ELSEWHERE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(list((tmp_path / "saved" / "weights").glob("model-*.pt"))) == 3 and store_files(store) == []
    watched = (f"{tmp_path}, {tmp_path}/checkpoints, {tmp_path}/lightning_logs, {tmp_path}/trainer_output")
    warning = no_checkpoint_warning(f"file://{store}", watched.split(", "))
    assert warning == (f"upload.to file://{store}: no checkpoint was found, nothing was uploaded (watched: {watched}); "
                       "if the training saved checkpoints, give their directory with --watch DIR")
    assert proc.stderr.count(f"trainvisor: {warning}\n") == 1
    assert f"  WARNING        {warning}" in summary_lines(proc.stderr)
    assert "  metrics        3" in summary_lines(proc.stderr)  # the other warning is not given
    log = (tmp_path / "r" / "train.log").read_text()
    assert f"WARNING trainvisor: {warning}\n" in log
    assert "INFO trainvisor: 0 of 0 checkpoint sets verified\n" in log
    assert "all checkpoint uploads verified" not in log and "no metrics parsed" not in log


NO_METRICS = """
for word in ('preparing', 'training', 'done'):
    print(word, flush=True)
"""


def test_an_output_without_metrics_ends_with_a_warning_naming_parser(tmp_path):
    proc = trainvisor(tmp_path, "--summary", program=NO_METRICS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "preparing\ntraining\ndone\n"
    warning = ("no metrics parsed from 3 lines of output (parser auto): choose the log format with --parser NAME "
               "(`trainvisor parsers` lists them) or give --rules FILE")
    assert warning == no_metrics_warning(3, "auto")
    assert proc.stderr.count(f"trainvisor: {warning}\n") == 1
    lines = summary_lines(proc.stderr)
    assert "  metrics        0" in lines and f"  WARNING        {warning}" in lines
    assert f"WARNING trainvisor: {warning}\n" in (tmp_path / "r" / "train.log").read_text()


def test_quiet_keeps_the_warning_in_the_run_log_only(tmp_path):
    proc = trainvisor(tmp_path, "-q", "--no-summary", program=NO_METRICS)
    assert proc.returncode == 0 and proc.stderr == ""
    log = (tmp_path / "r" / "train.log").read_text()
    assert "WARNING trainvisor: no metrics parsed from 3 lines of output (parser auto)" in log


def test_a_run_that_found_what_it_looked_for_ends_without_warnings():
    assert end_warnings(destination="file:///s", checkpoints_found=2, watched=["/w"], lines=10, metrics=4,
                        parser="auto") == ()
    assert end_warnings(destination=None, checkpoints_found=0, watched=[], lines=0, metrics=0, parser="auto") == ()
    assert end_warnings(destination="s3://b/p", checkpoints_found=0, watched=[], lines=0, metrics=0,
                        parser="auto") == (no_checkpoint_warning("s3://b/p", []),)
    assert "(watched: no directory)" in no_checkpoint_warning("s3://b/p", [])


def test_the_checkpoints_jsonl_record_has_one_line_per_complete_set_of_the_quick_start(tmp_path):
    """The README's quick start, in a temp directory: its fake training writes the snapshots under
    --snapshot-dir, and --watch makes the run record them."""
    run_dir, snaps = tmp_path / "tv-quick", tmp_path / "tv-quick" / "snapshots"
    proc = subprocess.run(TRAINVISOR + ["run", "--run-dir", str(run_dir), "--watch", str(snaps), "--",
                                        str(FIXTURES / "bin" / "fake-caffe"),
                                        str(FIXTURES / "logs" / "lenet-newyear.log"), "--snapshot-dir", str(snaps)],
                          cwd=FIXTURES.parent, capture_output=True, text=True, timeout=120, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert {"metrics.jsonl", "train.log", "run.json", "config.yaml", "checkpoints.jsonl"} <= {
        p.name for p in run_dir.iterdir()}
    records = [json.loads(x) for x in (run_dir / "checkpoints.jsonl").read_text().splitlines()]
    assert sorted(r["iteration"] for r in records) == [250, 500, 750, 1000]
    assert all(sorted(Path(f["relpath"]).suffix for f in r["files"]) == [".caffemodel", ".solverstate"]
               for r in records)


TORCH_SAVE = """
import torch
model = torch.nn.Linear(4, 1)
for epoch in (1, 2):
    print(f'epoch {epoch} loss={0.5 / epoch:.4f}', flush=True)
    torch.save(model.state_dict(), 'model.pt')  # as the PyTorch examples do: into the working directory
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is installed by `make test`")
@pytest.mark.parametrize("defaults", [True, False])
def test_a_plain_torch_save_into_the_working_directory_is_uploaded_unless_defaults_are_off(tmp_path, defaults):
    store = tmp_path / "store"
    flags = () if defaults else ("--no-default-watch",)
    proc = trainvisor(tmp_path, "--upload-to", f"file://{store}", *flags, program=TORCH_SAVE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = (tmp_path / "r" / "train.log").read_text()
    if defaults:
        assert (store / "r1" / "model.pt").read_bytes() == (tmp_path / "model.pt").read_bytes()
        assert proc.stderr == "" and "no checkpoint was found" not in log
    else:
        assert store_files(store) == []
        warning = no_checkpoint_warning(f"file://{store}", [])
        assert proc.stderr == f"trainvisor: {warning}\n" and f"WARNING trainvisor: {warning}\n" in log
