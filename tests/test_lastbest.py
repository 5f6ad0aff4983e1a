"""The summary's last/best table (`RunSummary.table`): each metric's last value and its best, in
the direction its name says, with their steps; read against what the real logs print."""
from __future__ import annotations

import math
import re
import sys

import pytest

import trainvisor
from trainvisor import Run, RunConfig
from trainvisor.config import LoggingConfig, ParsingConfig, RunDirConfig
from trainvisor.events import Metric
from trainvisor.sinks.lastbest import GOAL_MAX, GOAL_MIN, LastBest, goal_of
from trainvisor.summary import format_summary

from .conftest import FAKE_CAFFE, FIXTURES, real_logs

EPOCH_END = re.compile(r"- loss: ([\d.]+) - acc: ([\d.]+) - val_loss: ([\d.]+) - val_acc: ([\d.]+)\s*$")


@pytest.mark.parametrize("name, goal", [
    ("loss", GOAL_MIN), ("val_loss", GOAL_MIN), ("loss_cls", GOAL_MIN), ("top1_err", GOAL_MIN),
    ("eval_perplexity", GOAL_MIN), ("accuracy", GOAL_MAX), ("val_acc", GOAL_MAX), ("bbox/AP50", GOAL_MAX),
    ("eval_f1", GOAL_MAX), ("mAP", GOAL_MAX), ("lr", None), ("time", None), ("grad_norm", None),
    ("iter_per_sec", None), ("loss_scale", None), ("acc_loss", None),
])
def test_the_goal_comes_from_the_name(name, goal):
    assert goal_of(name) == goal


def test_keras_last_and_best_equal_what_the_log_prints():
    log = real_logs("keras") / "esartic-sound-cnn-30ep.log"
    printed = [tuple(map(float, m.groups())) for m in map(EPOCH_END.search, log.read_text().splitlines()) if m]
    assert len(printed) == 300  # 10 folds x 30 epochs
    metrics = trainvisor.replay(log).metrics
    table = LastBest()
    for m in metrics:
        table.add(m)
    rows = {(r.phase, r.name): r for r in table.rows()}
    steps = {key: [m.iteration for m in metrics if (m.phase, m.name) == key and not m.running] for key in rows}
    for col, key in enumerate([("train", "loss"), ("train", "acc"), ("val", "loss"), ("val", "acc")]):
        values = [p[col] for p in printed]
        row = rows[key]
        best = min(values) if key[1] == "loss" else max(values)
        assert (row.last, row.best, row.count) == (values[-1], best, 300)
        assert row.best_step == steps[key][values.index(best)]  # the first epoch that printed the best
        assert row.last_step == steps[key][-1]


def _m(name, value, iteration, running=False, phase="train"):
    return Metric(name, value, iteration, phase, None, None, None, 0.0, iteration, running=running)


def test_running_values_never_beat_completed_ones_and_nan_is_never_best():
    t = LastBest()
    t.add(_m("loss", 0.9, 1, running=True))
    t.add(_m("loss", 0.1, 2, running=True))  # a lucky batch
    (only_running,) = t.rows()
    assert (only_running.best, only_running.running) == (0.1, True)
    t.add(_m("loss", 0.5, 3))
    t.add(_m("loss", 0.05, 4, running=True))  # ignored: a completed value exists
    t.add(_m("loss", math.nan, 5))
    (row,) = t.rows()
    assert (row.best, row.best_step, row.count, row.running) == (0.5, 3.0, 2, False)
    assert math.isnan(row.last) and row.last_step == 5.0


def test_a_run_summary_has_the_table_and_prints_it(tmp_path):
    log = FIXTURES / "logs" / "lenet-newyear.log"
    text = log.read_text()
    accuracy = [(int(i), float(a)) for i, a in re.findall(
        r"Iteration (\d+), Testing net \(#0\)\n.*Test net output #0: accuracy = ([\d.]+)", text)]
    losses = [(int(i), float(v)) for i, v in re.findall(r"Iteration (\d+)(?: \(.*\))?, loss = ([\d.]+)", text)]
    config = RunConfig(command=(sys.executable, str(FAKE_CAFFE), str(log), "--no-snapshots"),
                       parsing=ParsingConfig(year=2026), run=RunDirConfig(dir=str(tmp_path / "run")),
                       logging=LoggingConfig(summary=True))  # the table is kept when a summary is asked for
    summary = Run(config, stdout_fd=None, stderr_fd=None).run()
    rows = {(r.phase, r.name): r for r in summary.table}
    acc = rows[("test", "accuracy")]
    best_it, best = max(accuracy, key=lambda p: p[1])
    assert (acc.last, acc.last_step, acc.best, acc.best_step) == (accuracy[-1][1], accuracy[-1][0], best, best_it)
    loss = rows[("train", "total_loss")]
    best_it, best = min(losses, key=lambda p: p[1])
    assert (loss.last, loss.best, loss.best_step) == (losses[-1][1], best, best_it)
    assert rows[("train", "lr")].best is None
    printed = format_summary(summary).splitlines()
    assert "  last / best    (at step: iteration, else epoch)" in printed
    (line,) = [p for p in printed if p.split()[:1] == ["test/accuracy"]]
    best_it, best = max(accuracy, key=lambda p: p[1])
    assert line.split() == ["test/accuracy", f"{accuracy[-1][1]:g}", "@", str(accuracy[-1][0]),
                            "best", f"{best:g}", "@", str(best_it)]


def test_without_a_summary_asked_for_the_run_keeps_no_table(tmp_path):
    # 0.25 us a record on the pipeline thread: a run that shows no summary (no --summary, not a
    # terminal, logging.summary unset) does not pay it; the counts are still kept.
    config = RunConfig(command=(sys.executable, str(FAKE_CAFFE), str(FIXTURES / "logs" / "lenet-newyear.log"),
                                "--no-snapshots"),
                       parsing=ParsingConfig(year=2026), run=RunDirConfig(dir=str(tmp_path / "run")))
    summary = Run(config, stdout_fd=None, stderr_fd=None).run()
    assert summary.table == () and summary.metrics == 91
