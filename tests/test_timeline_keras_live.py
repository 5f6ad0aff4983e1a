"""A live Keras training (3 small epochs, real Keras 3 on the CPU build of torch) gives one
epoch_end per epoch, each with that epoch's train and validation values as Keras's own History
recorded them, delivered to a callback loaded by `--callback` with its options from the config."""
from __future__ import annotations

import importlib.util
import json
import os

import pytest

from .conftest import ROOT
from .framework_runs import run_program
from .test_keras_live import CHILD_ENV, printed

live = pytest.mark.skipif(importlib.util.find_spec("keras") is None or importlib.util.find_spec("torch") is None,
                          reason="keras and torch are installed by `make test` (setup.cfg extra 'frameworks')")


@live
def test_a_live_keras_run_gives_one_epoch_end_per_epoch_with_its_train_and_validation_values(tmp_path):
    spec = "tests.timeline_callbacks:EventLog"
    out = tmp_path / "events.jsonl"
    (tmp_path / "tv.json").write_text(json.dumps({"callbacks": {"options": {spec: {"path": str(out)}}}}))
    # the checkout on the path, so `tests.timeline_callbacks` imports (the package is installed,
    # the tests folder is not)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    run_program(tmp_path, "keras_fit.py", "record.json", flags=("--config", "tv.json", "--callback", spec),
                env={**CHILD_ENV, "PYTHONPATH": path})
    history = json.loads((tmp_path / "record.json").read_text())["epochs"]
    epochs = len(history["loss"])
    names = {"loss": "train/loss", "accuracy": "train/accuracy", "val_loss": "val/loss",
             "val_accuracy": "val/accuracy"}
    expected = [{"kind": "epoch_end", "epoch": e + 1,
                 "values": {names[k]: printed(history[k][e]) for k in names}} for e in range(epochs)]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert epochs == 3
    assert [r for r in records if r["kind"] == "epoch_end"] == expected
    assert [r["kind"] for r in records].count("test_end") == epochs
    assert records[-1] == {"kind": "train_end", "exit_code": 0, "reason": "exit code 0", "stopped": False}
