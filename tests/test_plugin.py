"""The pytest plugin's fixtures, used as a test file of a user uses them (they come from the
plugin, registered by the entry point or by tests/conftest.py from a checkout)."""
from __future__ import annotations

import pytest

from trainvisor.events import CheckpointEvent, Metric

from .conftest import FIXTURES, real_logs

LENET = FIXTURES / "logs" / "lenet-newyear.log"


def comparable(events) -> list[tuple]:
    """Events as run and replay must agree on: wall-clock and stream aside."""
    return [e.without_wall_time() if type(e) is Metric else (e.kind, e.path, e.iteration, e.line)
            for e in events if type(e) in (Metric, CheckpointEvent)]


def test_replay_log_selects_a_series_with_its_steps_and_values(replay_log):
    done = replay_log(real_logs("caffe") / "bearpaw-fork-mnist.log", year=2026)
    test_acc = done.series("accuracy", phase="test")
    assert len(test_acc) == 21  # parse_log.py's reference test CSV has 21 rows
    assert test_acc.steps[:3] == [0, 500, 1000] and test_acc.values[:3] == [0.0756, 0.978, 0.9841]
    assert done.series("total_loss", phase="train").values[:2] == [10.0777, 0.362464]
    assert [c.path for c in done.checkpoints][:2] == ["examples/mnist/lenet_iter_1000.caffemodel",
                                                      "examples/mnist/lenet_iter_1000.solverstate"]
    assert ("accuracy", "test") in done.series_names()
    # The timeline a live run's callbacks get: one test_end per test pass of the log (21, as the
    # reference CSV), with its accuracy; the checkpoints it announced.
    tests = done.test_ends()
    assert len(tests) == 21 and [t.iteration for t in tests] == test_acc.steps
    assert [t.values["accuracy"] for t in tests] == test_acc.values and {t.phase for t in tests} == {"test"}
    assert done.faults == {}


def test_series_of_an_epoch_log_steps_by_epoch(replay_log):
    done = replay_log(real_logs("keras") / "kanji-keras1-verbose2-50ep.log")
    val_acc = done.series("acc", phase="val")
    assert len(val_acc) == 33 and val_acc.steps[:2] == [1, 2]  # 33 lines of the log carry val_acc
    # An epoch_end per epoch of the log; those of the epochs that validated carry it, in order.
    ends = [e for e in done.epoch_ends() if "val/acc" in e.values]
    assert [float(e.epoch) for e in ends] == val_acc.steps
    assert [e.values["val/acc"] for e in ends] == val_acc.values


@pytest.mark.parametrize("in_process", [True, False], ids=["Run", "trainvisor-run"])
def test_supervised_fake_caffe_gives_the_replay_records_and_its_bytes(in_process, tmp_path, fake_training,
                                                                      supervised_run, replay_log):
    argv = fake_training(LENET, snapshot_dir=tmp_path / "snap")
    done = supervised_run(argv, in_process=in_process, year=2026)
    assert done.exit_code == 0
    assert done.stderr == LENET.read_bytes() and done.stdout == b""
    replayed = replay_log(LENET, year=2026)
    assert comparable(done.events) == comparable(replayed.events) and len(done.metrics) == 91
    assert {e.stream for e in done.metrics} == {"stderr"}
    assert done.series("loss", phase="train").values == replayed.series("loss", phase="train").values
    # In process the Run's own RunSummary; as a command, the one its run directory keeps
    # (summary.json), read back whole: the same fields either way.
    s = done.summary
    assert (s.exit_code, s.metrics, s.checkpoints_announced, s.lines) == (0, 91, 8, len(LENET.read_bytes().splitlines()))
    if in_process:  # the whole summary asked for: each metric's last and best, typed
        assert s.last_metrics and all(type(m) is Metric for m in s.last_metrics)
        acc = {(r.phase, r.name): r for r in s.table}[("test", "accuracy")]
        assert (acc.last, acc.last_step) == (replayed.series("accuracy", phase="test").values[-1], 1000.0)
    assert (tmp_path / "snap/examples/mnist/lenet_iter_1000.solverstate").is_file()


def test_supervised_run_reports_the_exit_asked_for(fake_training, supervised_run):
    done = supervised_run(fake_training(LENET, snapshots=False, exit_code=3))
    assert done.exit_code == 3 and done.summary.returncode == 3


def test_assert_golden_passes_on_the_same_stream_and_shows_the_differing_record(replay_log, assert_golden,
                                                                                tmp_path):
    from trainvisor.testing.asserts import check_golden

    golden = tmp_path / "lenet.jsonl"
    check_golden(replay_log(LENET), golden, update=True)
    assert_golden(replay_log(LENET), golden)
    changed = tmp_path / "changed.log"
    changed.write_bytes(LENET.read_bytes().replace(b"loss = 1.74503\n", b"loss = 1.5\n"))
    with pytest.raises(AssertionError) as failure:
        check_golden(replay_log(changed), golden)  # what assert_golden does without --trainvisor-update-golden
    text = str(failure.value)
    assert "first difference at record 8: total_loss/train at iteration 50 (line 26): golden 1.74503, now 1.5" in text
    # pytest's own comparison of the two records (the helper's assert is rewritten by pytest)
    assert "Differing items:" in text and "{'value': 1.5} != {'value': 1.74503}" in text
