"""A live Keras 3 training (real Keras on the CPU build of torch) under `trainvisor run`: every
epoch's train and validation values at the epoch Keras's own `history` puts them, and the
checkpoints its ModelCheckpoint announces uploaded without `--watch`."""
from __future__ import annotations

import importlib.util
import json

import pytest

from .framework_runs import run_program
from .parsing_helpers import parse_file

# not imported here: without KERAS_BACKEND=torch (the program sets it) keras looks for TensorFlow
pytestmark = pytest.mark.skipif(importlib.util.find_spec("keras") is None or importlib.util.find_spec("torch") is None,
                                reason="keras and torch are installed by `make test` (setup.cfg extra 'frameworks')")

NAMES = {"loss": ("loss", "train"), "accuracy": ("accuracy", "train"),
         "val_loss": ("loss", "val"), "val_accuracy": ("accuracy", "val")}


def test_keras_fit_as_its_history_records_it_and_its_checkpoints_uploaded(tmp_path):
    store = tmp_path / "store"
    run = run_program(tmp_path, "keras_fit.py", "history.json",
                      flags=("--run-id", "k1", "--upload-to", f"file://{store}"))
    history = json.loads((tmp_path / "history.json").read_text())
    want = {(*NAMES[key], float(epoch), round(value, 4))
            for key, values in history.items() for epoch, value in enumerate(values, 1)}
    # an epoch's value: the last record of that name, phase and epoch (Keras prints 4 decimals)
    last = {}
    for m in run.metrics:
        if (m.name, m.phase) in NAMES.values() and not m.running:
            last[(m.name, m.phase, m.epoch)] = m.value
    assert {(*k, v) for k, v in last.items()} == want and len(want) == 12
    assert all(m.stream == "stdout" for m in run.metrics)
    stored = sorted(p.name for p in (store / "k1").rglob("*.keras"))
    assert stored == ["model-01.keras", "model-02.keras", "model-03.keras"]
    assert all((store / "k1" / n).read_bytes() == (tmp_path / "ckpt" / n).read_bytes() for n in stored)
    parser, replayed = parse_file(run.log, "auto")
    assert parser.chosen == "keras"
    assert [m.without_wall_time() for m in replayed if hasattr(m, "running")] == \
        [m.without_wall_time() for m in run.metrics]
