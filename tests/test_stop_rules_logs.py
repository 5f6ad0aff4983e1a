"""The rule engine over real logs replayed through the parsers: each rule fires at the line an
independent reading of the log says (tests/stoprule_helpers.py), with that line's value; the
silence rule fires from the pipeline's quiet-time tick under an injected clock; a rule naming a
metric the log never has is reported as unmatched."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

import trainvisor
from trainvisor.events import Metric
from trainvisor.parsers import ParserOptions, create_parser
from trainvisor.stoprules import StopRules, StopRuleSink
from trainvisor.stream.engine import StreamEngine
from trainvisor.stream.pipeline import Pipeline
from trainvisor.stream.source import Chunk, End, Eof

from .conftest import real_logs
from .stoprule_helpers import (CAFFE_TEST_ACCURACY, CAFFE_TEST_LOSS, CAFFE_TRAIN_LOSS, DARKNET_LOSS,
                               DARKNET_REGION16_IOU, KERAS_VAL_ACC, earliest, first_above, first_divergence,
                               first_nan, first_plateau, values)

METRIC_LINE = re.compile(r"output #\d+: \S+ = |Iteration \d+, (loss|lr) = ")


def _replay(path, rules, parser="auto"):
    fired = []
    engine = StopRules(rules)
    trainvisor.replay(path, parser=parser, year=2026, sinks=[StopRuleSink(engine, fired.append)], keep_events=False)
    assert len(fired) <= 1  # once: a run stops once
    return engine, (fired[0] if fired else None)


def test_threshold_on_caffe_test_accuracy():
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    line, value = first_above(values(log, CAFFE_TEST_ACCURACY), 0.98)
    _, firing = _replay(log, ["test/accuracy >= 0.98"], parser="caffe")
    assert (firing.line, firing.value, firing.metric, firing.stream) == (line, value, "test/accuracy", "log")
    assert (line, value) == (536, 0.9841)


def test_plateau_on_caffe_test_accuracy():
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    line, value = first_plateau(values(log, CAFFE_TEST_ACCURACY), 5, maximise=True)
    _, firing = _replay(log, ["test/accuracy no improvement in 5 evals"], parser="caffe")
    assert (firing.line, firing.value) == (line, value) == (820, 0.9916)
    assert firing.rule == "test/accuracy no improvement in 5 evals" and firing.iteration == 8500


def test_divergence_on_caffe_loss_reads_train_and_test_loss_as_two_series():
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    expected = earliest(first_divergence(values(log, CAFFE_TRAIN_LOSS), 10),
                        first_divergence(values(log, CAFFE_TEST_LOSS), 10))
    _, firing = _replay(log, ["loss > 10 * min(loss)"], parser="caffe")
    assert (firing.line, firing.value) == expected
    assert firing.metric == "train/loss"


def test_plateau_on_keras_val_acc_by_its_keras_name():
    log = real_logs("keras") / "kanji-keras1-verbose2-earlystop.log"
    line, value = first_plateau(values(log, KERAS_VAL_ACC), 2, maximise=True)
    _, firing = _replay(log, ["val_acc no improvement in 2 evals"])
    assert (firing.line, firing.value, firing.metric) == (line, value, "val/acc")


def test_nan_and_divergence_on_darknet():
    log = real_logs("darknet") / "darknet-yolov3-tiny-nan.log"
    line, value = first_nan(values(log, DARKNET_REGION16_IOU))
    _, firing = _replay(log, ["region16/avg_iou is nan"])
    assert firing.line == line and math.isnan(firing.value)
    div_line, div_value = first_divergence(values(log, DARKNET_LOSS), 10)
    _, firing = _replay(log, ["loss > 10 * min(loss)"])
    assert (firing.line, firing.value) == (div_line, div_value)


def test_darknet_loss_never_becomes_nan_and_a_missing_metric_is_unmatched():
    log = real_logs("darknet") / "darknet-yolov3-tiny-nan.log"
    assert first_nan(values(log, DARKNET_LOSS)) is None  # the log's nan values are region16's, not its loss
    engine, firing = _replay(log, ["loss is nan", "val/accuracy >= 0.9"])
    assert firing is None
    assert engine.unmatched() == ["val/accuracy >= 0.9"]
    assert "train/loss" in engine.names_seen


def test_iteration_bound_on_caffe():
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    _, firing = _replay(log, ["iteration >= 5000"], parser="caffe")
    with open(log) as f:  # the first value printed at iteration 5000: its test pass comes first
        lines = list(enumerate(f, 1))
    start = next(n for n, text in lines if "Iteration 5000," in text)
    line = next(n for n, text in lines if n > start and " = " in text)
    assert (firing.line, firing.value, firing.iteration, firing.metric) == (line, 5000.0, 5000, "iteration")
    assert firing.describe() == f"stop rule 'iteration >= 5000' fired at log line {line}: iteration 5000"


def test_no_metric_for_fires_from_the_pipelines_quiet_tick_under_an_injected_clock():
    """Metrics from a real log, then the child falls quiet: the engine's idle items (None) tick
    the pipeline, whose flush ticks the rule. The clock moves in the source, nothing sleeps."""
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    now = [1000.0]
    fired = []
    sink = StopRuleSink(StopRules(["no metric for 30 min"], now=now[0]), fired.append, clock=lambda: now[0])
    parser = create_parser("caffe", ParserOptions(year=2026))
    pipeline = Pipeline(parser, sinks=[sink], clock=lambda: now[0])
    head = b"".join(log.read_bytes().splitlines(keepends=True)[:560])

    def items():
        yield Chunk("stderr", head, now[0], 0.0)
        for _ in range(31):  # quiet: one idle item a minute
            now[0] += 60.0
            yield None
            if fired:
                break
        yield Eof("stderr")
        yield End()

    StreamEngine(pipeline, clock=lambda: now[0]).drive(items())
    pipeline.finish()
    assert len(fired) == 1
    firing = fired[0]
    assert firing.metric is None and firing.value == 1800.0 and now[0] == 1000.0 + 30 * 60  # counted from the last metric
    with open(log) as f:  # the last line of the head that prints a value
        last = max(n for n, text in enumerate(f, 1) if n <= 560 and METRIC_LINE.search(text))
    assert (firing.line, firing.stream) == (last, "stderr")
    assert firing.describe() == f"stop rule 'no metric for 30 min': no metric for 1800s (after the stderr line {last})"


def test_no_metric_for_counts_from_the_start_when_no_metric_ever_comes():
    rules = StopRules(["no metric for 90 s"], now=0.0)
    assert rules.tick(89.0) is None
    firing = rules.tick(90.0)
    assert firing.describe() == "stop rule 'no metric for 90 s': no metric for 90s (before any metric)"
    assert rules.tick(500.0) is None  # once


def test_running_values_are_skipped_except_by_is_nan():
    running = Metric("loss", math.nan, 3, "train", None, None, 0.0, 0.0, 7, running=True)
    rules = StopRules(["loss > 1", "loss is nan"])
    firing = rules.observe(running._replace(value=5.0))
    assert firing is None
    firing = rules.observe(running)
    assert firing.rule == "loss is nan" and firing.line == 7


def test_replay_says_where_a_live_run_would_have_stopped(tmp_path):
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    line, value = first_plateau(values(log, CAFFE_TEST_ACCURACY), 5, maximise=True)
    proc = subprocess.run([sys.executable, "-m", "trainvisor", "replay", str(log), "--parser", "caffe", "--year", "2026",
                           "--metrics", str(tmp_path / "m.jsonl"), "--stop-when", "no metric for 1 h",
                           "--stop-when", "test/accuracy no improvement in 5 evals", "--stop-when", "val/x is nan"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == (
        "trainvisor: stop rule 'no metric for 1 h' is not evaluated in a replay (no live timing)\n"
        "trainvisor: a live run would have stopped: stop rule 'test/accuracy no improvement in 5 evals' fired at "
        f"log line {line}: test/accuracy = {value!r} (iteration 8500)\n"
        "trainvisor: stop rule 'val/x is nan' never applied: no metric it names was parsed\n")
    last = json.loads((tmp_path / "m.jsonl").read_text().splitlines()[-1])
    assert last["line"] > line  # the log is read to its end


def test_replay_with_a_bad_rule_exits_2_before_reading(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "trainvisor", "replay", str(tmp_path / "missing.log"),
                           "--stop-when", "loss is"], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (
        2, "trainvisor: --stop-when 'loss is': column 8: expected nan, inf or not finite, got the end of the rule\n")


def test_epoch_bound_on_keras_reads_the_epoch_keras_prints():
    """Keras prints `Epoch 3/10` before the epoch's values: its records say epoch 3, so
    `epoch >= 3` holds on the values of the third epoch, once it has finished."""
    log = real_logs("keras") / "kanji-keras1-verbose2-earlystop.log"
    lines = log.read_text().splitlines()
    line = lines.index("Epoch 3/10") + 2  # the line after it (1-based: + 1 + 1)
    _, firing = _replay(log, ["epoch >= 3"])
    assert (firing.line, firing.value, firing.epoch, firing.metric) == (line, 3.0, 3.0, "epoch")


def test_divergence_compares_with_the_lowest_value_before_this_one():
    """A factor below 1 is allowed: the first value has nothing before it and never fires."""
    def metric(v, line):
        return Metric("loss", v, line, "train", None, None, None, 0.0, line)

    rules = StopRules(["loss > 0.5 * min(loss)"])
    assert rules.observe(metric(4.0, 1)) is None
    assert rules.observe(metric(math.nan, 2)) is None  # a nan neither lowers the minimum nor fires
    assert rules.observe(metric(1.0, 3)) is None  # 1.0 is not above 0.5 * 4.0
    assert rules.observe(metric(0.6, 4)).line == 4  # above 0.5 * 1.0


def test_the_summary_says_stopped_only_when_the_rule_stopped_the_training():
    from trainvisor.run.summary import RunSummary
    from trainvisor.stoprules import Firing
    from trainvisor.summary import format_summary

    firing = Firing("iteration >= 10000", "iteration", 10000.0, 877, "stderr", 10000, None)
    base = dict(run_id="r", attempt=1, run_dir="d", command=("x",), returncode=0, lines=882, events=1,
                stop_rule=firing)
    stopped = format_summary(RunSummary(exit_code=4, stop_reason=firing.describe(), **base))
    assert "  STOPPED        stop rule 'iteration >= 10000' fired at stderr line 877: iteration 10000\n" in stopped
    ended = format_summary(RunSummary(exit_code=0, stop_reason=None, **base))
    assert ("  STOP RULE      stop rule 'iteration >= 10000' fired at stderr line 877: iteration 10000 "
            "(the training had already ended or was stopping)\n") in ended
