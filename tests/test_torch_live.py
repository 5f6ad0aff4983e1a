"""A live plain-PyTorch training (real torch, CPU) that prints as the PyTorch MNIST example does,
under `trainvisor run`: every printed value is recorded with a step that grows across epochs,
the test set's values as phase test, each equal to the program's own number."""
from __future__ import annotations

import json

import pytest

from .framework_runs import run_program
from .parsing_helpers import parse_file

pytest.importorskip("torch", reason="torch is installed by `make test` (setup.cfg extra 'frameworks')")


def test_mnist_style_training_as_the_program_counts_it(tmp_path):
    run = run_program(tmp_path, "torch_mnist_style.py", "truth.jsonl")
    truth = [json.loads(line) for line in (tmp_path / "truth.jsonl").read_text().splitlines()]
    size = 640  # the program's training set
    want = []
    for t in truth:
        if t["kind"] == "train":
            step = (t["epoch"] - 1) * size + t["samples"]  # samples seen since training began
            want.append(("loss", "train", float(t["epoch"]), step, float(f"{t['loss']:.6f}")))
        else:
            step = t["epoch"] * size
            want.append(("loss", "test", float(t["epoch"]), step, float(f"{t['loss']:.4f}")))
            want.append(("accuracy", "test", float(t["epoch"]), step, t["correct"] / t["total"]))
    got = [(m.name, m.phase, m.epoch, m.iteration, m.value) for m in run.metrics]
    assert got == want and len(want) == 21
    train_steps = [m.iteration for m in run.metrics if m.phase == "train"]
    assert train_steps == sorted(set(train_steps))  # successive epochs follow each other
    parser, replayed = parse_file(run.log, "auto")
    assert parser.chosen == "pytorch"
    assert [(m.name, m.phase, m.epoch, m.iteration, m.value) for m in replayed] == want
