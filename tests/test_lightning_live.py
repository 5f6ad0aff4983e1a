"""Live PyTorch Lightning runs (real torch, CPU) under `trainvisor run`: each checkpoint that
ModelCheckpoint saves is uploaded while the training goes on, not by the sweep at exit; every
epoch's values are recorded where Lightning's own CSVLogger (metrics.csv) puts them, whichever
progress bar prints them (Rich through a pipe or on a terminal, tqdm), and replaying the saved
log gives the same records."""
from __future__ import annotations

import importlib.util
import re
import sqlite3
import subprocess
import sys

import pytest

from .conftest import FIXTURES
from .framework_runs import csv_rows, epoch_rows, lightning_csv, printed, run_program
from .parsing_helpers import parse_file

pytest.importorskip("lightning", reason="lightning is installed by `make test` (setup.cfg extra 'frameworks')")

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
needs_rich = pytest.mark.skipif(importlib.util.find_spec("rich") is None,
                                reason="rich is not installed (`make test` installs it: setup.cfg extra 'frameworks')")
# metrics.csv column -> (trainvisor's name, phase)
COLUMNS = {"train_loss": ("loss", "train"), "val_loss": ("loss", "val"), "val_acc": ("acc", "val")}
STEP_RUN_COLUMNS = {"train_loss_epoch": ("loss_epoch", "train"), "val_loss": ("loss", "val"), "val_acc": ("acc", "val")}


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


def assert_as_lightning_records(run, columns: dict) -> None:
    """Every per-epoch value of metrics.csv, at its epoch and step, and nothing else (no launcher
    chatter: `using: 0 TPU cores`, `max_epochs=3`, v_num); the saved log replays to the same."""
    want = csv_rows(lightning_csv(run.workdir / "logs"), columns)
    assert {row[2] for row in want} == {0.0, 1.0, 2.0} and len(want) == 9
    assert epoch_rows(run.metrics) == want
    parser, replayed = parse_file(run.log, "auto")
    assert parser.chosen == "lightning"
    assert epoch_rows(replayed) == want


@needs_rich
def test_rich_bar_through_a_pipe_every_epoch_as_lightning_records_it(tmp_path):
    run = run_program(tmp_path, "lightning_metrics.py", "rich", "logs")
    assert "val_acc: " in run.log.read_text(encoding="utf-8")  # the values were on continuation lines
    assert_as_lightning_records(run, COLUMNS)


@needs_rich
def test_rich_bar_on_a_terminal_every_epoch_as_lightning_records_it(tmp_path):
    run = run_program(tmp_path, "lightning_metrics.py", "rich", "logs", flags=("--pty",))
    assert_as_lightning_records(run, COLUMNS)


@pytest.fixture(scope="module")
def tqdm_run(tmp_path_factory):
    return run_program(tmp_path_factory.mktemp("tqdm"), "lightning_metrics.py", "tqdm", "logs", "steps")


def test_tqdm_bar_every_epoch_as_lightning_records_it(tqdm_run):
    assert_as_lightning_records(tqdm_run, STEP_RUN_COLUMNS)


def step_values(run) -> dict:
    """step -> train_loss_step as the bar prints it, from metrics.csv."""
    return {int(r["step"]): printed(r["train_loss_step"]) for r in lightning_csv(run.workdir / "logs")
            if r["train_loss_step"]}


def test_tqdm_step_values_are_running_values_at_lightnings_steps(tqdm_run):
    steps = step_values(tqdm_run)
    running = [(m.name, m.epoch, m.iteration, m.value) for m in tqdm_run.metrics if m.running]
    assert running  # today each line's final state: a few steps; every step once states reach the parser
    assert all((name, epoch, value) == ("loss_step", float(step // 10), steps[step])
               for name, epoch, step, value in running)


def test_tqdm_every_steps_value_is_recorded(tqdm_run):
    running = [(m.iteration, m.value) for m in tqdm_run.metrics if m.running]
    assert running == sorted(step_values(tqdm_run).items())
