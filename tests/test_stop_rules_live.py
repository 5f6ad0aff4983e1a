"""`trainvisor run --stop-when RULE` over a fake training replaying real logs: the run stops the
child (SIGINT: fake-caffe snapshots as Caffe does) at the line where the rule first holds (found
independently from the log text), exits 4, says which rule, line and value on stderr, in the run
log and in the summary, and metrics.jsonl holds that very record; the snapshot written on SIGINT
is uploaded and verified. A rule on a metric the run never produced is said at the end."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from trainvisor.run.summary import EXIT_STOPPED

from .conftest import FAKE_CAFFE, real_logs
from .stoprule_helpers import (CAFFE_TEST_ACCURACY, CAFFE_TRAIN_LOSS, DARKNET_LOSS, DARKNET_REGION16_IOU,
                               first_divergence, first_nan, first_plateau, values)

RATE = "400"  # lines a second: the bearpaw log's 882 lines in about 2 s
# The child then sleeps (--sleep-at-end 60): on a loaded machine the SIGINT may come after its last
# line, and a child that had ended on its own would not show that the rule stopped it.


def _run(work: Path, log: Path, rules: list[str], *trainvisor_args: str, child_args: tuple[str, ...] = ()):
    argv = [sys.executable, "-m", "trainvisor", "run", "--run-dir", str(work / "run"), "--summary", "--year", "2026"]
    for rule in rules:
        argv += ["--stop-when", rule]
    argv += [*trainvisor_args, "--", sys.executable, str(FAKE_CAFFE), str(log), "--rate", RATE,
             "--on-sigint", "snapshot", "--snapshot-dir", str(work / "snap"), "--sleep-at-end", "60", *child_args]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")}
    env.update(LANG="C.UTF-8", TZ="UTC")
    return subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=180, env=env)


def _records(work: Path) -> list[dict]:
    return [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]


def _assert_stopped_at(proc, work: Path, rule: str, stream: str, line: int, value: str, metric: str,
                       iteration=None) -> None:
    """Exit 4; stderr, the run log and the summary name the rule, the line and the value; the
    record of that line in metrics.jsonl is the value the rule read."""
    assert proc.returncode == EXIT_STOPPED, proc.stderr[-3000:]
    at = f" (iteration {iteration})" if iteration is not None else ""
    said = f"stop rule {rule!r} fired at {stream} line {line}: {metric} = {value}{at}"
    assert f"trainvisor: {said}: stopping the training\n" in proc.stderr
    assert f"  STOPPED        {said}\n" in proc.stderr and "  exit code      4\n" in proc.stderr
    assert f"the training was stopped on request ({said}); exit code 4 (the child's 0)" in \
        (work / "run" / "train.log").read_text()
    phase, name = metric.split("/", 1)
    hit = [r for r in _records(work) if r.get("line") == line and r.get("name") == name and r.get("phase") == phase]
    assert len(hit) == 1 and repr(float(hit[0]["value"])) == repr(float(value))


def test_divergence_stops_caffe_and_the_snapshot_written_on_sigint_is_uploaded(tmp_path):
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    line, value = first_divergence(values(log, CAFFE_TRAIN_LOSS), 10)
    proc = _run(tmp_path, log, ["loss > 10 * min(loss)"], "--parser", "caffe", "--watch", "snap",
                "--upload-to", f"file://{tmp_path / 'store'}")
    _assert_stopped_at(proc, tmp_path, "loss > 10 * min(loss)", "stderr", line, repr(value), "train/loss", 1500)
    # The iteration the solver had reached when SIGINT came: the last one any line named (its
    # `Iteration N (...), loss` line may be out before its train net's `loss` line is)
    last = max(r["iteration"] for r in _records(tmp_path) if "event" not in r and r["iteration"] is not None)
    assert 1500 <= last < 10000  # the log goes on to 10000: SIGINT stopped it
    snapshot = f"lenet_iter_{last}.caffemodel"
    local = {p.name: p.read_bytes() for p in (tmp_path / "snap").rglob("lenet_iter_*")}
    stored = {p.name: p.read_bytes() for p in (tmp_path / "store").rglob("lenet_iter_*") if "manifest" not in p.name}
    assert snapshot in local and stored == local
    with sqlite3.connect(tmp_path / "run" / "uploads.sqlite") as db:
        verified = sorted(key.rsplit("/", 1)[1] for (key,) in
                          db.execute("SELECT key FROM files WHERE state='verified' AND key LIKE '%lenet_iter_%'"))
    assert [v for v in verified if "manifest" not in v] == sorted(local)
    # The log's own snapshot at 1000, then the one written on SIGINT: both sets complete and verified.
    iterations = {int(name.split("_iter_")[1].split(".")[0]) for name in local}
    assert max(iterations) == last
    assert f"{len(iterations)} sets verified, 0 pending, 0 failed" in proc.stderr
    complete = [json.loads(x) for x in (tmp_path / "run" / "checkpoints.jsonl").read_text().splitlines()]
    assert {c["iteration"] for c in complete} == iterations


def test_no_improvement_in_5_evals_stops_caffe_at_the_fifth_test_pass_without_one(tmp_path):
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    line, value = first_plateau(values(log, CAFFE_TEST_ACCURACY), 5, maximise=True)
    proc = _run(tmp_path, log, ["test/accuracy no improvement in 5 evals"], "--parser", "caffe")
    _assert_stopped_at(proc, tmp_path, "test/accuracy no improvement in 5 evals", "stderr", line, repr(value),
                       "test/accuracy", 8500)


def test_is_nan_stops_darknet_on_stdout(tmp_path):
    log = real_logs("darknet") / "darknet-yolov3-tiny-nan.log"
    line, _ = first_nan(values(log, DARKNET_REGION16_IOU))
    proc = _run(tmp_path, log, ["region16/avg_iou is nan"], child_args=("--stdout",))
    # darknet prints a Region line before its iteration's line: the record has no iteration yet
    _assert_stopped_at(proc, tmp_path, "region16/avg_iou is nan", "stdout", line, "nan", "train/region16/avg_iou")
    assert max(r["line"] for r in _records(tmp_path)) < 12602  # stopped long before the log's end


def test_divergence_stops_darknet_and_a_rule_on_a_metric_never_seen_is_said_at_the_end(tmp_path):
    log = real_logs("darknet") / "darknet-yolov3-tiny-nan.log"
    line, value = first_divergence(values(log, DARKNET_LOSS), 10)
    iteration = int(log.read_text().splitlines()[line - 1].split(":")[0])
    proc = _run(tmp_path, log, ["val/accuracy no improvement in 3 evals", "loss > 10 * min(loss)"],
                child_args=("--stdout",))
    _assert_stopped_at(proc, tmp_path, "loss > 10 * min(loss)", "stdout", line, repr(value), "train/loss",
                       iteration)
    unseen = "stop rule 'val/accuracy no improvement in 3 evals' never applied: no metric it names was parsed"
    assert f"trainvisor: {unseen}" in proc.stderr and f"  WARNING        {unseen}" in proc.stderr


def test_the_run_api_records_the_firing_in_the_summary(tmp_path):
    from trainvisor import Run, RunConfig
    from trainvisor.config import LoggingConfig, ParsingConfig, ProcessConfig, RunDirConfig, StopConfig
    from trainvisor.stoprules import Firing

    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    line, value = first_plateau(values(log, CAFFE_TEST_ACCURACY), 5, maximise=True)
    config = RunConfig(command=(sys.executable, str(FAKE_CAFFE), str(log), "--rate", RATE, "--on-sigint", "snapshot",
                                "--snapshot-dir", str(tmp_path / "snap"), "--sleep-at-end", "60"),
                       process=ProcessConfig(cwd=str(tmp_path)), parsing=ParsingConfig(parser="caffe", year=2026),
                       logging=LoggingConfig(quiet=True), run=RunDirConfig(dir=str(tmp_path / "run")),
                       stop=StopConfig(when=("test/accuracy no improvement in 5 evals", "iteration >= 20000")))
    summary = Run(config, stdout_fd=None, stderr_fd=None).run()
    firing = Firing("test/accuracy no improvement in 5 evals", "test/accuracy", value, line, "stderr", 8500, None)
    assert (summary.exit_code, summary.returncode, summary.stop_rule) == (EXIT_STOPPED, 0, firing)
    assert summary.stop_reason == firing.describe()
    assert summary.warnings == ()  # both rules read metrics: nothing unapplied


def test_a_caffe_loss_pinned_at_87_3365_is_stopped_by_the_divergence_rule(tmp_path):
    # No log in ../shared/real-logs shows it, so fake-caffe generates what Caffe prints once a
    # training diverged: every loss 87.3365 (-log(FLT_MIN)). The rule fires at the first such
    # train loss, not at the test net's (phase test) that may come first.
    from fixtures.caffe_log import DIVERGED_LOSS, generate_caffe_log

    log = tmp_path / "diverging.log"
    log.write_text("".join(generate_caffe_log(max_iter=2000, display=50, test_interval=500, snapshot=10000,
                                              diverge_at=1210)))
    lines = log.read_text().splitlines()
    # Caffe's `loss` is the train net's output line (the iteration line's is `total_loss`)
    first = next(n for n, text in enumerate(lines, 1) if f"Train net output #0: loss = {DIVERGED_LOSS:g}" in text)
    assert lines[first - 2].split("] ", 1)[1].startswith("Iteration 1250 (")
    proc = _run(tmp_path, log, ["train/loss > 10 * min(train/loss)"], "--parser", "caffe")
    _assert_stopped_at(proc, tmp_path, "train/loss > 10 * min(train/loss)", "stderr", first, repr(DIVERGED_LOSS),
                       "train/loss", 1250)


def test_a_caffe_loss_that_becomes_nan_is_stopped_by_loss_is_nan(tmp_path):
    # No real log here has a NaN loss (darknet's -nan is a layer's IOU): fake-caffe generates what
    # glog prints, `loss = nan`. `loss is nan` fires at the train net's first `loss = nan` line.
    from fixtures.caffe_log import generate_caffe_log

    log = tmp_path / "nan.log"
    log.write_text("".join(generate_caffe_log(max_iter=2000, display=50, test_interval=500, snapshot=10000,
                                              nan_at=730)))
    lines = log.read_text().splitlines()
    first = next(n for n, text in enumerate(lines, 1) if "Train net output #0: loss = nan" in text)
    assert lines[first - 2].split("] ", 1)[1].startswith("Iteration 750 (")
    proc = _run(tmp_path, log, ["loss is nan"], "--parser", "caffe")
    _assert_stopped_at(proc, tmp_path, "loss is nan", "stderr", first, "nan", "train/loss", 750)
