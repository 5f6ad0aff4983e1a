"""The summary counts checkpoint sets, not log lines, and says per destination what the upload
journal says: a Keras-style run saving 5 checkpoints says 5, a Caffe run with 4 sets says 4."""
from __future__ import annotations

import subprocess
import sys

from .conftest import FAKE_CAFFE, FIXTURES

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
KERAS_STYLE = """
import os, time
os.makedirs('ckpt', exist_ok=True)
for epoch in range(1, 6):
    print(f'Epoch {epoch}/5')
    print(f'100/100 - 1s - 10ms/step - loss: {1 / epoch:.4f} - val_loss: {1.5 / epoch:.4f}', flush=True)
    with open(f'ckpt/model-{epoch:03d}.keras', 'wb') as fh:
        fh.write(os.urandom(4096))
    print(f'Epoch {epoch}: saving model to ckpt/model-{epoch:03d}.keras', flush=True)
"""


def summary_of(stderr: str) -> list[str]:
    return stderr[stderr.index("trainvisor summary"):].splitlines()


def test_a_keras_style_run_with_5_checkpoints_says_5(tmp_path):
    (tmp_path / "train.py").write_text(KERAS_STYLE)
    proc = subprocess.run(TRAINVISOR + ["run", "--summary", "--run-dir", "r", "--watch", "ckpt",
                                        "--upload-to", f"file://{tmp_path / 'store'}", "--", sys.executable, "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = summary_of(proc.stderr)
    assert "  checkpoints    5 complete" in lines
    assert f"  uploads        file://{tmp_path / 'store'}: 5 sets verified, 0 pending, 0 failed (10 objects verified)" \
        in lines  # 5 files + 5 manifests
    assert sorted(p.name for p in (tmp_path / "store").rglob("*.keras")) == [f"model-{e:03d}.keras" for e in range(1, 6)]


def test_a_caffe_run_with_4_sets_says_4(tmp_path):
    proc = subprocess.run(TRAINVISOR + ["run", "--summary", "--run-dir", "r", "--year", "2026", "--watch", "snap",
                                        "--upload-to", f"file://{tmp_path / 'store'}", "--", sys.executable,
                                        str(FAKE_CAFFE), str(FIXTURES / "logs" / "lenet-newyear.log"),
                                        "--snapshot-dir", "snap"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = summary_of(proc.stderr)
    assert "  checkpoints    4 complete" in lines  # the log announces 8 files: 4 sets
    assert f"  uploads        file://{tmp_path / 'store'}: 4 sets verified, 0 pending, 0 failed (12 objects verified)" \
        in lines
    assert "    test/accuracy       0.9658 @ 1000           best 0.9658 @ 1000" in lines  # the log's last test
