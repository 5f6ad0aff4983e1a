"""`trainvisor run --upload-to URL` without `--watch`: a checkpoint the training's log announces
in a folder nobody named is uploaded while the training goes on (the fake training waits for the
store's manifest before it ends, and says whether it came)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import FIXTURES

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
PROGRAM = FIXTURES / "programs" / "announce_train.py"


@pytest.mark.parametrize("style,parser,folder,files", [
    ("keras", "keras", "ckpt", ["best.keras"]),
    ("hf", "huggingface", "out", [f"checkpoint-2/{n}" for n in (
        "config.json", "model.safetensors", "optimizer.pt", "rng_state.pth", "scheduler.pt", "trainer_state.json")]),
    ("yolo", "yolo", "runs/train/weights", ["last.pt"]),
])
def test_announced_checkpoint_is_uploaded_during_the_run_without_watch(tmp_path, style, parser, folder, files):
    store = tmp_path / "store"
    proc = subprocess.run(TRAINVISOR + ["run", "-q", "--run-dir", "r", "--run-id", "r1", "--parser", parser,
                                        "--settle", "30", "--upload-to", f"file://{store}", "--",
                                        sys.executable, str(PROGRAM), style, str(store)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "uploaded during the run: yes" in proc.stdout   # not by the sweep at the end
    for rel in files:
        assert (store / "r1" / rel).read_bytes() == (tmp_path / folder / rel).read_bytes()
    (record,) = [json.loads(x) for x in (tmp_path / "r" / "checkpoints.jsonl").read_text().splitlines()]
    assert sorted(f["relpath"] for f in record["files"]) == files
    log = (tmp_path / "r" / "train.log").read_text()
    assert f"watching {tmp_path / folder}: the training's log announced a checkpoint there" in log


def test_no_announced_watch_leaves_announced_folders_alone_and_says_nothing_is_uploaded(tmp_path):
    store = tmp_path / "store"
    proc = subprocess.run(TRAINVISOR + ["run", "--run-dir", "r", "--run-id", "r1", "--parser", "keras",
                                        "--no-announced-watch", "--upload-to", f"file://{store}", "--",
                                        sys.executable, str(PROGRAM), "keras", str(store), "--no-wait"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no --watch directory and announced directories are not watched (--no-announced-watch): " \
           "nothing will be uploaded" in proc.stderr
    assert (tmp_path / "ckpt" / "best.keras").exists() and not (store / "r1").exists()
