"""`trainvisor parse --csv` against Caffe's own tools/extra/parse_log.py answers.

The reference CSVs in ../shared/real-logs/caffe were made with the log year 2026,
so every parse here passes --year 2026.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainvisor.cli import cli

from .caffe_helpers import read_table, replay_events
from .conftest import REAL_LOGS, real_logs

CAFFE = REAL_LOGS / "caffe"
LOGS_WITH_REFERENCES = sorted(
    p.name for p in CAFFE.glob("*.log") if Path(f"{p}.train.csv").exists() or Path(f"{p}.test.csv").exists()
) if CAFFE.is_dir() else []

# Where parse_log.py is wrong, the test asserts the right value instead:
# (log, table, row index, column) -> (parse_log.py's value, the right value, why)
PARSE_LOG_BUGS = {
    ("ducha-squeezenet224-2gpu.log", "test", 0, "LearningRate"): (
        0.0376565,
        0.0388329,
        "fix_initial_nan_learning_rate() overwrites the first row's learning rate with the second "
        "row's even when it is not NaN: this run resumed at iteration 240, and the last lr printed "
        "before the first test (line 3924, 'Iteration 4960, lr = 0.0388329') is the right one",
    ),
}


def run_parse(log: Path, outdir: Path) -> None:
    result = CliRunner().invoke(cli, ["parse", str(log), "--csv", str(outdir), "--year", "2026"], catch_exceptions=False)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("log_name", LOGS_WITH_REFERENCES or ["(no real logs)"])
def test_parse_csv_matches_caffe_parse_log_reference(log_name, tmp_path):
    real_logs("caffe")
    log = CAFFE / log_name
    run_parse(log, tmp_path)
    compared = 0
    for table in ("train", "test"):
        ref_path = Path(f"{log}.{table}.csv")
        mine_path = tmp_path / f"{log_name}.{table}"
        if not ref_path.exists():
            continue
        assert mine_path.exists(), f"{table} table not written"
        ref_cols, ref_rows = read_table(ref_path)
        cols, rows = read_table(mine_path)
        assert cols == ref_cols
        assert len(rows) == len(ref_rows)
        for i, (ref, mine) in enumerate(zip(ref_rows, rows)):
            for col in ref_cols:
                expected = ref[col]
                bug = PARSE_LOG_BUGS.get((log_name, table, i, col))
                if bug is not None:
                    assert expected == bug[0], "the reference no longer shows the documented parse_log.py bug"
                    expected = bug[1]
                if col == "Seconds":
                    assert mine[col] == pytest.approx(expected, abs=1e-6), (table, i, col)
                elif math.isnan(expected):
                    assert math.isnan(mine[col]), (table, i, col)
                else:
                    assert mine[col] == expected, (table, i, col)
                compared += 1
    assert compared > 0


def test_single_row_test_table_is_written_where_parse_log_writes_none(tmp_path):
    # parse_log.py flushes a row only when a second one appears: with one test
    # pass (line 8374, 'Iteration 10000, Testing net (#0)') it writes no test CSV.
    log = real_logs("caffe") / "ssd-voc0712-nul-tail.log"
    run_parse(log, tmp_path)
    cols, rows = read_table(tmp_path / f"{log.name}.test")
    assert cols == ["NumIters", "Seconds", "LearningRate", "detection_eval"]
    assert len(rows) == 1
    assert rows[0]["NumIters"] == 10000.0 and rows[0]["detection_eval"] == 0.642119


def test_nul_tail_and_unterminated_last_line_are_parsed_to_the_end():
    events = replay_events(real_logs("caffe") / "ssd-voc0712-nul-tail.log")
    last = events.metrics[-1]
    # The file's last glog line before the 524 NUL bytes: 'Iteration 10360, lr = 0.001'.
    assert (last.name, last.value, last.iteration) == ("lr", 0.001, 10360)
    mbox = [m for m in events.metrics if m.name == "mbox_loss"]
    assert (mbox[-1].value, mbox[-1].line) == (4.30131, 8487)


def test_old_caffe_without_train_outputs_gets_a_loss_table(tmp_path):
    # parse_log.py writes no train CSV for 2014-era logs (no 'Train net output' lines).
    log = real_logs("caffe") / "oxford102-vggs-old-caffe.log"
    run_parse(log, tmp_path)
    cols, rows = read_table(tmp_path / f"{log.name}.train")
    assert cols == ["NumIters", "Seconds", "LearningRate", "loss"]
    assert len(rows) == 297  # 297 'Iteration N, loss = L' lines
    assert (rows[0]["NumIters"], rows[0]["loss"]) == (0.0, 5.4591)  # line 1045
    assert (rows[-1]["NumIters"], rows[-1]["loss"]) == (14800.0, 0.00026788)  # line 1697


def test_pycaffe_log_where_parse_log_crashes():
    # First 'Solving' is a Python print ('Solving begins ...'): parse_log.py crashes.
    events = replay_events(real_logs("caffe") / "pycaffe-centerloss-squeezenet.log")
    totals = [m for m in events.metrics if m.name == "total_loss"]
    assert len(totals) == 400
    assert (totals[0].iteration, totals[0].value, totals[0].seconds) == (0, 9.2707, 0.0)
    center = [m for m in events.metrics if m.name == "center_loss"]
    assert (center[0].value, center[-1].value) == (0.500898, 87.1493)  # raw output, not the weighted 0.697195
    ckpts = [e for e in events.events if type(e).__name__ == "CheckpointEvent"]
    assert [(c.kind, c.iteration) for c in ckpts][:2] == [("weights", 50000), ("solverstate", 50000)]
    assert ckpts[-1].path == "./output/poly_iter_200000.solverstate" and len(ckpts) == 8


def test_py_faster_rcnn_stages_and_absurd_first_speed():
    events = replay_events(real_logs("caffe") / "pyfrcnn-alt-opt-zf.log")
    totals = [m for m in events.metrics if m.name == "total_loss"]
    assert len(totals) == 4582
    first = totals[0]
    assert (first.iteration, first.value, first.line) == (0, 4.74855, 801)
    speed = [m for m in events.metrics if m.name == "iter_per_sec"]
    assert speed[0].value == 2.27325e08 and speed[1].value == 13.1926
    # Two 'Iteration 0 (...)' lines: the stages restart counting.
    assert sum(1 for m in totals if m.iteration == 0) == 2
    cls = [m for m in events.metrics if m.name == "cls_loss"]
    assert (cls[-1].value, cls[-1].line) == (0.369996, 22728)


def test_windows_three_digit_exponents_and_interrupted_last_line():
    events = replay_events(real_logs("caffe") / "simplenet-mnist-windows.log")
    totals = [m for m in events.metrics if m.name == "total_loss"]
    assert (totals[0].iteration, totals[0].value) == (0, 4.1066e-05)
    # The file ends inside 'solver.cpp^C': the last complete loss line is iteration 36100.
    assert (totals[-1].iteration, totals[-1].value) == (36100, 1.1158e-06)


def test_log_with_no_training_gives_no_metrics_and_no_tables(tmp_path):
    log = real_logs("caffe") / "ducha-adaadam-libcudart-error.log"
    result = CliRunner().invoke(cli, ["parse", str(log), "--csv", str(tmp_path)])
    assert result.exit_code == 0
    assert "no Caffe metrics found" in result.output
    assert list(tmp_path.iterdir()) == []
