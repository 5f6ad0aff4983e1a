"""The `tensorboard` sink: real logs replayed through it, on its own thread as a run gives it one,
and read back with TensorBoard's own reader (EventAccumulator, a different implementation from
the tensorboardX writer): every non-running scalar of metrics.jsonl is there, with its value (as
float32: what TensorBoard stores) and its step; running values, NaN, ranks as documented."""
from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

import trainvisor
from trainvisor.errors import ConfigError
from trainvisor.sinks.jsonl import read_jsonl
from trainvisor.sinks.registry import make_sink
from trainvisor.sinks.threaded import CloseDeadline, ThreadedSink

from .conftest import FIXTURES, real_logs
from .scalar_helpers import expected_scalars

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                        reason="TensorBoard's reader (pip install tensorboard) reads the files back")
pytest.importorskip("tensorboardX", reason="the sink writes with tensorboardX (pip install tensorboardX)")


def _f32(v: float) -> float:
    """What TensorBoard keeps of a value: its nearest 32-bit float."""
    return struct.unpack("f", struct.pack("f", v))[0]


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _replay(log: Path, tmp_path: Path, parser: str = "auto", **kw) -> tuple[list, dict]:
    """`log` replayed into metrics.jsonl and the tensorboard sink made by the registry, on a
    thread of its own (as a run runs it); the metrics and what TensorBoard reads, by tag."""
    info, sink = make_sink("tensorboard", {"dir": str(tmp_path / "tb")})
    assert not info.inline
    threaded = ThreadedSink(sink, "tensorboard", capacity=10 ** 6, deadline=CloseDeadline(120))
    trainvisor.replay(log, parser=parser, year=2020, metrics=tmp_path / "m.jsonl", sinks=[threaded],
                      keep_events=False, **kw)
    counts = threaded.counts()
    assert (counts.dropped, counts.failed, counts.abandoned) == (0, 0, False)
    metrics = [e for e in read_jsonl(tmp_path / "m.jsonl") if isinstance(e, trainvisor.Metric)]
    acc = event_accumulator.EventAccumulator(str(tmp_path / "tb"), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    read = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    return metrics, read


def _expected(metrics: list) -> dict:
    """The scalars metrics.jsonl says TensorBoard must hold, by the documented naming."""
    return expected_scalars(metrics, _f32)


def _assert_all_there(metrics: list, read: dict) -> None:
    want = _expected(metrics)
    assert sorted(read) == sorted(want)
    for tag, points in want.items():
        got = read[tag]
        assert [s for s, _ in got] == [s for s, _ in points], tag
        assert all(_same(a, b) for (_, a), (_, b) in zip(got, points)), tag


@pytest.mark.parametrize("framework, log, n, tags, first", [
    # bearpaw's Caffe run: 100 train iterations displayed, 21 tests of one net (the log's first:
    # "Test net output #0: accuracy = 0.0756" at iteration 0)
    ("caffe", "bearpaw-fork-mnist.log", 343, 5, ("test/accuracy", 0, 0.0756)),
    # Keras 2 verbose lines: iteration and epoch; train and val
    ("keras", "esartic-sound-cnn-30ep.log", 1200, 4, ("train/loss", 15726, 2.1921)),
    # Keras 1 lines carry no iteration: the epoch is the step
    ("keras", "kanji-keras1-verbose2-50ep.log", 198, 4, ("train/loss", 1, 3.5508)),
    # detectron2: iterations; an evaluation's `box_proposals/AR@100` tagged with `_` for `@`
    ("detectron2", "bupt-d2-rpn-fpn-backbone-fpn.log", 2708, 14, ("train/total_loss", 199, 0.292)),
])
def test_every_scalar_of_metrics_jsonl_is_in_tensorboard_with_its_value_and_step(tmp_path, framework, log, n,
                                                                                  tags, first):
    metrics, read = _replay(real_logs(framework) / log, tmp_path)
    assert len(metrics) == n and not any(m.running for m in metrics)
    assert len(read) == tags
    _assert_all_there(metrics, read)
    tag, step, value = first
    assert read[tag][0] == (step, _f32(value))


def test_detectron2_evaluation_tags_keep_their_groups(tmp_path):
    _, read = _replay(real_logs("detectron2") / "bupt-d2-rpn-fpn-backbone-fpn.log", tmp_path)
    assert "val/box_proposals/AR_100" in read and "val/box_proposals/ARs_1000" in read
    assert read["val/box_proposals/AR_100"][0][0] == 89999  # the final evaluation's iteration


def test_running_values_have_their_own_section_and_the_epoch_curve_stays_whole(tmp_path):
    # Keras 3 progress bars (a UTF-16 log): 5760 mid-epoch values, 300 completed ones
    metrics, read = _replay(real_logs("keras") / "keras3-utf16le-ansi.log", tmp_path)
    running = [m for m in metrics if m.running]
    assert (len(running), len(metrics) - len(running)) == (5760, 300)
    _assert_all_there(metrics, read)
    assert {t.split("/")[0] for t in read} == {"running", "train", "val"}
    assert len(read["train/loss"]) == len([m for m in metrics if m.name == "loss" and m.phase == "train"
                                           and not m.running])


def test_nan_and_infinite_losses_are_written_not_dropped(tmp_path):
    # darknet's YOLOv3-tiny run diverged: 14340 of its 57000 values are NaN or infinite
    metrics, read = _replay(real_logs("darknet") / "darknet-yolov3-tiny-nan.log", tmp_path)
    bad = [m for m in metrics if not math.isfinite(m.value)]
    assert (len(metrics), len(bad)) == (57000, 14340)
    _assert_all_there(metrics, read)
    assert sum(1 for pts in read.values() for _, v in pts if not math.isfinite(v)) == 14340


def test_two_ranks_are_tagged_from_their_first_value(tmp_path):
    # torchrun's two ranks, every rank reported: each rank a curve of its own from the start
    metrics, read = _replay(FIXTURES / "logs" / "ranks-torchrun-tee.log", tmp_path, ranks="all")
    assert {m.rank for m in metrics} == {0, 1}
    assert sorted(read) == ["test/accuracy/rank0", "test/accuracy/rank1", "test/loss/rank0",
                            "test/loss/rank1", "train/loss/rank0", "train/loss/rank1"]
    for m in metrics:
        tag = f"{m.phase}/{m.name}/rank{m.rank}"
        assert (m.iteration, _f32(m.value)) in read[tag]
    assert read["train/loss/rank1"][0] == (0, _f32(2.298311))  # the log's first rank-1 line


def test_one_selected_rank_keeps_plain_tags(tmp_path):
    metrics, read = _replay(FIXTURES / "logs" / "ranks-torchrun-tee.log", tmp_path)  # --ranks 0, the default
    assert {m.rank for m in metrics} == {0}
    assert sorted(read) == ["test/accuracy", "test/loss", "train/loss"]
    assert read["train/loss"][0] == (0, _f32(2.30576))


def test_a_rank_seen_after_the_wait_is_tagged_and_the_first_keeps_its_tag(tmp_path):
    from trainvisor.sinks.tensorboard import TensorBoardSink

    metrics = trainvisor.replay(FIXTURES / "logs" / "ranks-torchrun-tee.log", ranks="all", year=2020).metrics
    rank0 = [m for m in metrics if m.rank == 0]
    rank1 = [m for m in metrics if m.rank == 1]
    sink = TensorBoardSink(str(tmp_path / "tb"), rank_wait=len(rank0))  # rank 0 alone fills the wait
    sink.write(rank0 + rank1)
    sink.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == ["test/accuracy", "test/accuracy/rank1", "test/loss",
                                             "test/loss/rank1", "train/loss", "train/loss/rank1"]


def test_a_missing_dir_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        make_sink("tensorboard", {})
    assert "needs option `dir` (sinks.options.tensorboard.dir)" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_run_named_with_sink_tensorboard_writes_every_metric_of_its_jsonl(tmp_path):
    # a real `trainvisor run` of fake-caffe: the sink made from the YAML config, on its own thread
    import json
    import os
    import subprocess
    import sys

    from .conftest import FAKE_CAFFE, ROOT

    (tmp_path / "run.yaml").write_text(f"sinks: {{options: {{tensorboard: {{dir: {json.dumps(str(tmp_path / 'tb'))}}},"
                                       f" csv: {{dir: {json.dumps(str(tmp_path / 'csv'))}}}}}}}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINVISOR")}
    env.update(PYTHONPATH=str(ROOT), LC_ALL="C.UTF-8", COLUMNS="200", TRAINVISOR_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "trainvisor", "run", "--config", str(tmp_path / "run.yaml"),
                           "--sink", "tensorboard", "--sink", "csv", "--summary", "--year", "2026", "--parser", "caffe",
                           "--run-dir", str(tmp_path / "run"), "--", sys.executable, str(FAKE_CAFFE), "train",
                           "--generate", "600", "--no-snapshots"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = [e for e in read_jsonl(tmp_path / "run" / "metrics.jsonl") if isinstance(e, trainvisor.Metric)]
    assert len(metrics) == 91  # fake-caffe's generated log, as the run's own JSONL holds them
    acc = event_accumulator.EventAccumulator(str(tmp_path / "tb"), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    _assert_all_there(metrics, {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]})
    summary = proc.stderr[proc.stderr.index("trainvisor summary"):]
    assert "sink tensorboard" in summary and "sink csv" in summary
    assert sorted(p.name for p in (tmp_path / "csv").iterdir()) == ["test.csv", "train.csv"]


def test_naming_the_sink_costs_the_start_no_import_of_the_writer(tmp_path):
    # tensorboardX's __init__ loads torch (seconds): made before the child starts, the sink only
    # checks that the package is there; the import waits for its first value, on its own thread
    import subprocess
    import sys

    from .conftest import ROOT

    code = ("import sys; from trainvisor.sinks.registry import make_sink; "
            f"make_sink('tensorboard', {{'dir': {str(tmp_path / 'tb')!r}}}); "
            "print(sorted(m for m in ('tensorboardX', 'torch', 'numpy') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    assert list((tmp_path / "tb").iterdir()) == []  # no event file before the first value


def test_writing_loads_neither_torch_nor_numpy_and_tensorboardx_imports_whole_after(tmp_path):
    # The event writer's three modules are loaded without tensorboardX's __init__ (which imports
    # torch, installed here): the supervising process stays small. A later `import tensorboardX`
    # (a user's code in the same process) still gets the whole package.
    import subprocess
    import sys

    from .conftest import ROOT

    code = ("import sys; from trainvisor.sinks.tensorboard import TensorBoardSink; "
            "from trainvisor.events import Metric; "
            f"s = TensorBoardSink({str(tmp_path / 'tb')!r}); "
            "s.write([Metric('loss', 0.5, 3, 'train', None, None, None, 1.0, 1)]); s.close(); "
            "print(sorted(m for m in ('tensorboardX', 'torch', 'numpy') if m in sys.modules)); "
            "import tensorboardX; print(hasattr(tensorboardX, 'SummaryWriter'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["[]", "True"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(3, 0.5)]


def test_one_rank_alone_is_written_once_the_wait_for_a_second_has_passed(tmp_path):
    # `--ranks 0` (the default) reports one rank: its values wait at most rank_wait_seconds
    # (checked at a flush, which a run does every second), then go out with plain tags
    from trainvisor.sinks.tensorboard import TensorBoardSink

    metrics = trainvisor.replay(FIXTURES / "logs" / "ranks-torchrun-tee.log", ranks="all", year=2020).metrics
    rank0 = [m for m in metrics if m.rank == 0]
    now = [100.0]
    sink = TensorBoardSink(str(tmp_path / "tb"), rank_wait_seconds=30, clock=lambda: now[0])
    sink.write(rank0[:4])
    now[0] = 129.5
    sink.flush()
    assert list((tmp_path / "tb").iterdir()) == []  # still waiting: nothing written yet
    now[0] = 130.0
    sink.flush()
    sink.write(rank0[4:] + [m for m in metrics if m.rank == 1])
    sink.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path / "tb"), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == ["test/accuracy", "test/accuracy/rank1", "test/loss",
                                             "test/loss/rank1", "train/loss", "train/loss/rank1"]
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [(m.iteration, _f32(m.value)) for m in rank0
                                                                       if m.phase == "train"]
