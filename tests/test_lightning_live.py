"""A live PyTorch Lightning run (real torch, CPU) under `trainvisor run`: each checkpoint that
ModelCheckpoint saves is uploaded while the training goes on, not by the sweep at exit."""
from __future__ import annotations

import re
import sqlite3
import subprocess
import sys

import pytest

from .conftest import FIXTURES

pytest.importorskip("lightning", reason="lightning is installed by `make test` (setup.cfg extra 'frameworks')")

TRAINVISOR = [sys.executable, "-m", "trainvisor"]


def test_lightning_checkpoints_are_uploaded_while_the_training_goes_on(tmp_path):
    proc = subprocess.run(TRAINVISOR + ["run", "-q", "--run-dir", "r", "--watch", "ckpt",
                                        "--upload-to", f"file://{tmp_path / 'store'}", "--", sys.executable,
                                        str(FIXTURES / "programs" / "lightning_train.py"), "ckpt", "logs"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = float(re.search(r"training done at (\d+\.\d+)", proc.stdout).group(1))
    local = {p.name: p.stat().st_mtime for p in (tmp_path / "ckpt").glob("*.ckpt")}
    assert sorted(n.split("-")[0] for n in local) == ["epoch=0", "epoch=1", "epoch=2"]
    with sqlite3.connect(tmp_path / "r" / "uploads.sqlite") as db:
        verified = {key.rsplit("/", 1)[1]: when for key, when in
                    db.execute("SELECT key, updated FROM files WHERE state='verified' AND key LIKE '%.ckpt'")}
    assert verified.keys() == local.keys()
    for name, when in verified.items():
        assert when < done - 1.0, f"{name} uploaded only at the end"  # the program works 2 s after fit
    first = next(n for n in local if n.startswith("epoch=0"))
    last = next(n for n in local if n.startswith("epoch=2"))
    assert verified[first] < local[last]  # epoch 0 was in the store before epoch 2 was saved
    for name in local:
        assert (tmp_path / "ckpt" / name).read_bytes() == next((tmp_path / "store").rglob(name)).read_bytes()
