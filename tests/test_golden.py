"""Golden metric files: `trainvisor replay LOG --check GOLDEN` and `--update-golden`, on a real
Caffe log changed on purpose in a temporary copy."""
from __future__ import annotations

import subprocess
import sys

import pytest

from trainvisor.testing.golden import compare_golden, golden_records, read_golden

from .conftest import real_logs

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
LOSS_100 = b"solver.cpp:214] Iteration 100, loss = 0.362464\n"   # line 503 of bearpaw-fork-mnist.log
ACCURACY_500 = b"solver.cpp:343]     Test net output #0: accuracy = 0.978\n"  # line 516


def replay(*args, cwd=None):
    return subprocess.run(TRAINVISOR + ["replay", "--year", "2026", *map(str, args)], capture_output=True,
                          text=True, timeout=60, cwd=cwd)


@pytest.fixture
def mnist(tmp_path):
    """The real log, and its golden file as `--update-golden` writes it."""
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    golden = tmp_path / "mnist.golden.jsonl"
    done = replay(log, "--check", golden, "--update-golden")
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert done.stderr == f"wrote {golden} (363 records)\n"
    return log, golden


def test_unchanged_log_matches_its_golden_file_without_wall_clock_fields(mnist):
    log, golden = mnist
    records = read_golden(golden)
    assert len(records) == 363 and not any("wall_time" in r for r in records)
    assert records[0] == {"name": "accuracy", "value": 0.0756, "iteration": 0, "phase": "test", "test_net": 0,
                          "seconds": records[0]["seconds"], "epoch": None, "line": 498, "stream": "log"}
    done = replay(log, "--check", golden)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", f"{golden}: 363 records match\n")


def test_changed_metric_fails_check_naming_series_step_and_both_values_then_update_passes(mnist, tmp_path):
    log, golden = mnist
    changed = tmp_path / "changed.log"
    data = log.read_bytes()
    assert data.count(LOSS_100) == 1
    changed.write_bytes(data.replace(LOSS_100, LOSS_100.replace(b"0.362464", b"0.5")))
    done = replay(changed, "--check", golden)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"{golden}: the metric stream differs from the golden file (363 golden records, 363 now)",
        "first difference at record 6: total_loss/train at iteration 100 (line 503): golden 0.362464, now 0.5",
        "  value: golden 0.362464, now 0.5",
    ]
    assert replay(changed, "--check", golden, "--update-golden").returncode == 0
    assert replay(changed, "--check", golden).returncode == 0
    assert replay(log, "--check", golden).returncode == 1  # the golden file now holds the changed stream


def test_a_lost_record_shows_the_counts_per_series(mnist, tmp_path):
    log, golden = mnist
    changed = tmp_path / "lost.log"
    changed.write_bytes(log.read_bytes().replace(ACCURACY_500, b"solver.cpp:343]     (line lost)\n"))
    done = replay(changed, "--check", golden)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[1] == ("first difference at record 18: accuracy/test at iteration 500 (line 516): "
                               "golden 0.978, now 0.138375")  # now: the loss of that test
    assert lines[-1] == "records per series (golden -> now): accuracy/test 21 -> 20"  # 21 test rows, as parse_log.py's reference CSV


def test_check_of_a_missing_or_broken_golden_file_is_one_line(mnist, tmp_path):
    log, _ = mnist
    missing = replay(log, "--check", tmp_path / "none.jsonl")
    assert missing.returncode != 0 and missing.stderr.count("\n") == 1
    assert "cannot read golden file" in missing.stderr and "--update-golden" in missing.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"name": "loss"}\nnot json\n')
    done = replay(log, "--check", broken)
    assert done.returncode != 0 and done.stderr.startswith(f"trainvisor: {broken}:2: not a JSON record")
    assert done.stderr.count("\n") == 1
    alone = replay(log, "--update-golden")
    assert alone.returncode != 0 and alone.stderr == "trainvisor: --update-golden needs --check GOLDEN (the file to write)\n"


def test_comparison_treats_nan_values_as_equal_records(replay_log):
    """A NaN loss (darknet's ``-nan``) is written as the string ``nan``: the same log matches itself."""
    log = real_logs("darknet") / "darknet-yolov3-tiny-nan.log"
    records = golden_records(replay_log(log).events)
    assert any(r.get("value") == "nan" for r in records)
    assert compare_golden(records, golden_records(replay_log(log).events)).equal
