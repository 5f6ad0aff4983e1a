"""Live PyTorch Lightning runs (real torch, CPU) under `trainvisor run`: each checkpoint that
ModelCheckpoint saves is uploaded while the training goes on, not by the sweep at exit; every
epoch's values are recorded where Lightning's own CSVLogger (metrics.csv) puts them, whichever
progress bar prints them (Rich, tqdm), through a pipe or on a terminal (`--pty`), at 80 and 200
columns, for 3 and 12 epochs; where Lightning printed only the last epoch's values, a notice says
so; replaying the saved log gives the same records. One tiny training per configuration."""
from __future__ import annotations

import importlib.util
import re
import sqlite3
import subprocess
import sys

import pytest

from .conftest import FIXTURES
from trainvisor.events import Metric, Notice
from trainvisor.parsers.lightning import NOTICE_RICH_FINAL_ONLY

from .framework_runs import csv_rows, epoch_rows, lightning_csv, printed, printed_lines, run_program
from .parsing_helpers import parse_file

pytest.importorskip("lightning", reason="lightning is installed by `make test` (setup.cfg extra 'frameworks')")

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
needs_rich = pytest.mark.skipif(importlib.util.find_spec("rich") is None,
                                reason="rich is not installed (`make test` installs it: setup.cfg extra 'frameworks')")
# metrics.csv column -> (trainvisor's name, phase)
COLUMNS = {"train_loss": ("loss", "train"), "val_loss": ("loss", "val"), "val_acc": ("acc", "val")}
STEP_RUN_COLUMNS = {"train_loss_epoch": ("loss_epoch", "train"), "val_loss": ("loss", "val"), "val_acc": ("acc", "val")}


def test_lightning_checkpoints_are_uploaded_while_the_training_goes_on(tmp_path):
    """The training looks in the store itself (no clocks compared): epoch 0's checkpoint is there
    before epoch 2 begins, and all three before it exits, i.e. before the end-of-run sweep."""
    store = tmp_path / "store"
    proc = subprocess.run(TRAINVISOR + ["run", "-q", "--run-dir", "r", "--watch", "ckpt",
                                        "--upload-to", f"file://{store}", "--", sys.executable,
                                        str(FIXTURES / "programs" / "lightning_train.py"), "ckpt", "logs", str(store)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    local = sorted(p.name for p in (tmp_path / "ckpt").glob("*.ckpt"))
    assert [n.split("-")[0] for n in local] == ["epoch=0", "epoch=1", "epoch=2"]
    before_epoch_2 = re.search(r"store before epoch 2: (.*)", proc.stdout).group(1).split()
    assert before_epoch_2[0] == local[0] and not any(n.startswith("epoch=2") for n in before_epoch_2)
    assert "store before exit: 3\n" in proc.stdout
    with sqlite3.connect(tmp_path / "r" / "uploads.sqlite") as db:
        verified = sorted(key.rsplit("/", 1)[1] for (key,) in
                          db.execute("SELECT key FROM files WHERE state='verified' AND key LIKE '%.ckpt'"))
    assert verified == local
    for name in local:
        assert (tmp_path / "ckpt" / name).read_bytes() == next(store.rglob(name)).read_bytes()


def assert_as_lightning_records(run, columns: dict, epochs: int = 3, also: frozenset = frozenset()) -> None:
    """Every per-epoch value of metrics.csv, at its epoch and step, once, and nothing else (no
    launcher chatter: `using: 0 TPU cores`, `max_epochs=3`, v_num; `also`: the other finished
    values expected), each on the line of the child's stdout it is on; the saved log replays to
    the same."""
    want = csv_rows(lightning_csv(run.workdir / "logs"), columns)
    assert {row[2] for row in want} == set(map(float, range(epochs))) and len(want) == 3 * epochs
    want |= also
    finished = [m for m in run.metrics if not m.running]
    assert epoch_rows(finished) == want and len(finished) == len(want)
    lines = printed_lines(run)
    assert all(m.stream == "stdout" and f"{m.value:.3f}" in lines[m.line - 1] for m in finished)
    assert not run.notices
    parser, replayed = parse_file(run.log, "auto")
    assert parser.chosen == "lightning"
    assert epoch_rows(replayed) == want and len([m for m in replayed if not getattr(m, "running", True)]) == len(want)


def rich_run(tmp_path, columns: int, epochs: int, *flags: str):
    # on a terminal each batch takes 20 ms, so that Rich redraws between batches and draws the
    # validation row (a bar through a pipe is printed once, whatever the pace)
    pace = "pace=0.02" if "--pty" in flags else "pace=0"
    return run_program(tmp_path, "lightning_metrics.py", "rich", "logs", f"epochs={epochs}", pace, flags=flags,
                       columns=columns)


@needs_rich
@pytest.mark.parametrize("columns,epochs", [(80, 3), (80, 12), (200, 3), (200, 12)])
def test_rich_bar_through_a_pipe_every_epoch_as_lightning_records_it(tmp_path, columns, epochs):
    run = rich_run(tmp_path, columns, epochs)
    out = run.log.read_text(encoding="utf-8")
    # at 80 columns the values wrap onto continuation lines below the bar; at 200 they fit beside it
    assert ("\n" + " " * 40 in out) == (columns == 80) and "val_acc: " in out
    assert_as_lightning_records(run, COLUMNS, epochs)
    assert not any(m.running for m in run.metrics)  # every value is an epoch's


@needs_rich
@pytest.mark.parametrize("columns,epochs", [(80, 3), (80, 12), (200, 3), (200, 12)])
def test_rich_bar_on_a_terminal_every_epoch_as_lightning_records_it(tmp_path, columns, epochs):
    # Rich redraws each row with `\r ESC[2K`, a wrapped row going up `ESC[1A ESC[2K` row by row
    run = rich_run(tmp_path, columns, epochs, "--pty")
    out = run.log.read_text(encoding="utf-8")
    assert "\x1b[2K" in out and "\x1b[1A" in out and "Validation " in out
    assert_as_lightning_records(run, COLUMNS, epochs)
    assert not any(m.running for m in run.metrics)  # train_loss is logged per epoch: never running


@needs_rich
def test_lightnings_default_rich_bar_through_a_pipe_says_the_earlier_epochs_are_not_in_the_output(tmp_path):
    run = run_program(tmp_path, "lightning_metrics.py", "default", "logs")
    (notice,) = run.notices
    assert notice.code == NOTICE_RICH_FINAL_ONLY and "--pty" in notice.message and "TQDMProgressBar" in notice.message
    assert printed_lines(run)[notice.line - 1].startswith("Epoch 2/2 ")  # the only bar printed
    last_epoch = {row for row in csv_rows(lightning_csv(tmp_path / "logs"), COLUMNS) if row[2] == 2.0}
    assert epoch_rows(run.metrics) == last_epoch and len(run.metrics) == 3
    parser, replayed = parse_file(run.log, "auto")
    assert parser.chosen == "lightning"
    assert [e.code for e in replayed if type(e) is Notice] == [NOTICE_RICH_FINAL_ONLY]
    assert epoch_rows([e for e in replayed if type(e) is Metric]) == last_epoch


@pytest.fixture(scope="module")
def tqdm_run(tmp_path_factory):
    return run_program(tmp_path_factory.mktemp("tqdm"), "lightning_metrics.py", "tqdm", "logs", "steps")


def last_batch_steps(run) -> dict:
    """step -> train_loss_step of each epoch's last batch (10 an epoch): a finished step's value."""
    return {step: value for step, value in step_values(run).items() if step % 10 == 9}


def test_tqdm_bar_every_epoch_as_lightning_records_it(tqdm_run):
    steps = {("loss_step", "train", float(step // 10), step, v) for step, v in last_batch_steps(tqdm_run).items()}
    assert len(steps) == 3
    assert_as_lightning_records(tqdm_run, STEP_RUN_COLUMNS, also=frozenset(steps))


# The tqdm bar at both widths, 3 and 12 epochs, piped and on a terminal (the step-values run above
# is the piped 80-column, 3-epoch case with per-step values too).
@pytest.mark.parametrize("flags,columns,epochs", [((), 80, 12), ((), 200, 3), ((), 200, 12),
                                                  (("--pty",), 80, 3), (("--pty",), 80, 12),
                                                  (("--pty",), 200, 3), (("--pty",), 200, 12)])
def test_tqdm_bar_every_epoch_as_lightning_records_it_at_any_width_and_on_a_terminal(tmp_path, flags, columns, epochs):
    run = run_program(tmp_path, "lightning_metrics.py", "tqdm", "logs", f"epochs={epochs}", flags=flags,
                      columns=columns)
    assert_as_lightning_records(run, COLUMNS, epochs)


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
    # mid-epoch steps running, each epoch's last batch not (the rule of every bar parser)
    step_records = [(m.iteration, m.value, m.running) for m in tqdm_run.metrics if m.name == "loss_step"]
    assert step_records == [(step, v, step % 10 != 9) for step, v in sorted(step_values(tqdm_run).items())]
