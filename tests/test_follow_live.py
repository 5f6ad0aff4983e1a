"""A live PyTorch Lightning run (real torch, CPU; 3 small epochs) under `trainvisor run --follow`:
Lightning's own Rich bar through a pipe prints only the last epoch's values, and its CSVLogger's
metrics.csv, followed, gives every value it holds, once, at its epoch and step, tagged with the
file; the console's own records stay, tagged stdout."""
from __future__ import annotations

import importlib.util

import pytest

from trainvisor.parsers.lightning import NOTICE_RICH_FINAL_ONLY

from .framework_runs import csv_rows, epoch_rows, lightning_csv, printed_lines, run_program

pytest.importorskip("lightning", reason="lightning is installed by `make test` (setup.cfg extra 'frameworks')")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("rich") is None,
                                reason="rich is not installed (`make test` installs it: setup.cfg extra 'frameworks')")

COLUMNS = {"train_loss": ("loss", "train"), "val_loss": ("loss", "val"), "val_acc": ("acc", "val")}


def test_a_piped_rich_bar_with_metrics_csv_followed_reports_every_value_once_from_the_file(tmp_path):
    run = run_program(tmp_path, "lightning_metrics.py", "default", "logs", flags=("--follow", "logs/*/*/metrics.csv"))
    table = lightning_csv(tmp_path / "logs")
    (path,) = (tmp_path / "logs").rglob("metrics.csv")
    source = "file:" + str(path.relative_to(tmp_path))
    assert source == "file:logs/lt/version_0/metrics.csv"
    assert set(table[0]) == {"epoch", "step", *COLUMNS}  # the logger wrote nothing else to compare
    # every filled cell of metrics.csv, exactly as written, on the line of the file it is on
    want = sorted((*COLUMNS[col], float(row["epoch"]), int(row["step"]), float(row[col]), line, source)
                  for line, row in enumerate(table, 2) for col in COLUMNS if row[col])
    assert len(want) == 9 and {w[2] for w in want} == {0.0, 1.0, 2.0}
    from_file = [m for m in run.metrics if m.stream == source]
    assert sorted((m.name, m.phase, m.epoch, m.iteration, m.value, m.line, m.stream) for m in from_file) == want
    assert not any(m.running for m in from_file)
    # the console's records stay, tagged with theirs: the last epoch's bar and its notice
    console = [m for m in run.metrics if m.stream != source]
    last_epoch = {row for row in csv_rows(table, COLUMNS) if row[2] == 2.0}
    assert {m.stream for m in console} == {"stdout"} and len(console) == 3 and epoch_rows(console) == last_epoch
    lines = printed_lines(run)
    assert all(f"{m.value:.3f}" in lines[m.line - 1] for m in console)
    assert [n.code for n in run.notices] == [NOTICE_RICH_FINAL_ONLY]
