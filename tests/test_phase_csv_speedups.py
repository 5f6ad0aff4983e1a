"""The optional C loop of the per-phase CSV sink (sinks/_phase_csv.c) writes exactly the files
the Python loop writes: real logs of several frameworks through their real parsers, in batches of
varied sizes, compared byte for byte as the files grow and at the end; then the edge cases."""
from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trainvisor
from trainvisor.events import Metric
from trainvisor.sinks import phase_csv

from .conftest import FIXTURES, real_logs

pytestmark = pytest.mark.skipif(phase_csv._c_write is None, reason="C speedup not built (no compiler at install)")

BATCHES = (1, 2, 7, 64, 1000, 3, 250)  # cycled: rows split across calls, many rows in one call


def _c_write(sink: phase_csv.PhaseCsvSink, events: list) -> None:
    """The C loop itself, whatever TRAINVISOR_PURE_PYTHON says (sink.write's choice)."""
    phase_csv._c_write(events, sink, phase_csv._CSV_ENV)


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def _both_ways(events: list, tmp_path: Path, *, compare_every: int = 1) -> dict[str, bytes]:
    """The events through a C-loop sink and a Python-loop sink in the same batches; the two
    folders compared after every `compare_every`-th batch (flushed) and after close."""
    c_sink = phase_csv.PhaseCsvSink(tmp_path / "c")
    py_sink = phase_csv.PhaseCsvSink(tmp_path / "py")
    start, sizes = 0, itertools.cycle(BATCHES)
    for n_batch in itertools.count():
        if start >= len(events):
            break
        batch = events[start:start + next(sizes)]
        start += len(batch)
        _c_write(c_sink, batch)
        py_sink._write(batch)
        if n_batch % compare_every == 0:
            c_sink.flush()
            py_sink.flush()
            assert _files(tmp_path / "c") == _files(tmp_path / "py"), f"after batch {n_batch}"
    c_sink.close()
    py_sink.close()
    c_files = _files(tmp_path / "c")
    assert c_files == _files(tmp_path / "py")
    assert c_sink.paths() == tuple(str(tmp_path / "c" / Path(p).name) for p in py_sink.paths())
    return c_files


@pytest.mark.parametrize("framework, log, kw, tables", [
    ("caffe", "bearpaw-fork-mnist.log", {}, {"train.csv", "test.csv"}),
    # six outputs of its test net: one wide test row per evaluation
    ("caffe", "digits-googlenet-6-test-outputs.log", {}, {"train.csv", "test.csv"}),
    ("caffe", "pycaffe-centerloss-squeezenet.log", {}, {"train.csv"}),  # 4 train outputs, no test
    ("keras", "kanji-keras1-verbose2-50ep.log", {}, {"train.csv", "val.csv"}),  # epochs come again
    ("keras", "keras3-utf16le-ansi.log", {}, {"train.csv", "val.csv"}),  # 5760 running values left out
    ("detectron2", "bupt-d2-faster-c4.log", {}, {"train.csv", "val.csv"}),
    ("mmdetection", "mmdet2-faster-rcnn-12ep.log", {}, {"train.csv", "val.csv"}),
    ("lightning", "wandb-lightning-progress.log", {}, None),
    ("pytorch", "detr-metriclogger-ddp.log", {}, {"train.csv", "val.csv"}),  # bbox/* columns come late
    ("huggingface", "eshaubale-hf-trainer-padded.log", {}, None),  # train_runtime widens train.csv
])
def test_c_and_python_loops_write_the_same_bytes_on_real_logs(tmp_path, framework, log, kw, tables):
    metrics = trainvisor.replay(real_logs(framework) / log, year=2020, **kw).metrics
    assert len(metrics) > 10
    files = _both_ways(list(metrics), tmp_path, compare_every=1 if len(metrics) < 20000 else 25)
    if tables is not None:
        assert set(files) == tables
    assert all(len(body.splitlines()) > 1 for body in files.values())


def test_ranks_and_a_late_rank_column_match(tmp_path):
    metrics = trainvisor.replay(FIXTURES / "logs" / "ranks-torchrun-tee.log", year=2020, ranks="all").metrics
    assert {m.rank for m in metrics} >= {0, 1}
    # the first rows of no rank, then the ranks: the rank column is added by a rewrite
    early = [m._replace(rank=None, iteration=-1) for m in metrics[:5]]
    files = _both_ways(early + list(metrics), tmp_path)
    assert files["train.csv"].startswith(b"iteration,epoch,seconds,rank,")


class _Odd(float):
    """A float whose repr needs CSV quoting (a value the parsers never give: the rare path)."""

    def __repr__(self) -> str:
        return f"odd({float(self)},x)"


def _m(name, value, iteration=1, *, phase="train", test_net=None, seconds=None, epoch=None, rank=None,
       running=False) -> Metric:
    return Metric(name, value, iteration, phase, test_net, seconds, epoch, 0.0, 1, "log", rank, running)


EDGE = [
    _m("loss", math.nan, 0, seconds=0.5), _m("acc", math.inf, 0), _m("neg", -math.inf, 0),
    _m("loss", -0.0, 1, epoch=1.0, seconds=2.0), _m("acc", 1e-300, 1, epoch=1.0),
    _m("loss", 1e300, 2, epoch=-0.0, seconds=1e20), _m("loss", 0.1, 3, epoch=2.5, seconds=-0.0),
    _m("loss", 2.0, 3, epoch=2.5),  # the name again in one step: a row of its own
    _m("loss", 0.3, 4, epoch=1e20), _m("loss", 0.4, 5, epoch=1e300, seconds=math.nan),
    _m("loss", 0.5, 6, epoch=math.inf), _m("loss", 0.6, None, epoch=None), _m("loss", 0.7, 2 ** 70),
    _m("loss", 9.0, 7, running=True), _m("acc", 9.0, 7, running=True),  # running: never in a row
    _m("a,b", 1.0, 7), _m('say "hi"', 2.0, 7), _m("two\nlines", 3.0, 7),
    _m("loss", 5, 8), _m("loss", _Odd(1.5), 9), _m("loss", _Odd(2.0), 10, epoch=_Odd(3.0)),
    _m("accuracy", 0.9, 0, phase="test", seconds=1.0), _m("accuracy", 0.8, 0, phase="test", test_net=1),
    _m("loss", 0.7, 0, phase="test", test_net=2), _m("map", 0.1, 0, phase="test1"),  # test1.csv twice
    _m("accuracy", 0.95, 100, phase="test", test_net=1), _m("loss", 0.1, 11),
    _m("loss", 0.2, 11, rank=3), _m("loss", 0.3, 11, rank=1), _m("acc", 0.4, 11, rank=3),
    _m("loss", 0.5, 12, rank=1, seconds=3.0), _m("loss", 0.6, 12), _m("ünï", 0.7, 12),
]


def test_edge_cases_match(tmp_path):
    files = _both_ways(EDGE, tmp_path)
    train = files["train.csv"].decode()
    assert train.splitlines()[:2] == ['iteration,epoch,seconds,rank,loss,acc,neg,"a,b","say ""hi""","two', 'lines",ünï']
    assert "\n0,,0.5,,nan,inf,-inf,,,,\n1,1,2,,-0.0,1e-300,,,,,\n2,0,100000000000000000000,,1e+300," in train
    assert "\n3,2.5,0,,0.1,,,,,,\n3,2.5,,,2.0,,,,,,\n4,100000000000000000000,,,0.3," in train  # -0.0 s: 0
    assert f"\n5,{int(1e300)},nan,,0.4," in train and "\n6,inf,,,0.5,,,,,,\n,,,,0.6,,,,,,\n" in train
    assert f"\n{2 ** 70},,,,0.7," in train and "\n7,,,,,,,1.0,2.0,3.0,\n8,,,,5," in train
    assert '\n9,,,,"odd(1.5,x)",' in train and '\n10,3,,,"odd(2.0,x)",' in train
    assert train.endswith("\n11,,,1,0.3,,,,,,\n11,,,,0.1,,,,,,\n12,,,,0.6,,,,,,0.7\n12,,3,1,0.5,,,,,,\n11,,,3,0.2,0.4,,,,,\n")
    assert "9.0" not in train  # the running values
    assert set(files) == {"train.csv", "test.csv", "test1.csv", "test2.csv"}
    # phase "test1" and test net 1 of "test" share test1.csv, and the row of iteration 0
    assert files["test1.csv"].decode().splitlines() == ["iteration,epoch,seconds,accuracy,map", "0,,,0.8,0.1",
                                                        "100,,,0.95,"]


def test_more_tables_than_one_call_holds_match(tmp_path):
    # 20 phases interleaved in one batch: past the 16 tables one call keeps, all are flushed
    events = [_m("v", float(i * 20 + k), i, phase=f"p{k}") for i in range(30) for k in range(20)]
    files = _both_ways(events, tmp_path)
    assert len(files) == 20
    assert files["p7.csv"].decode().splitlines()[:3] == ["iteration,epoch,seconds,v", "0,,,7.0", "1,,,27.0"]


def test_the_c_loop_keeps_no_reference(tmp_path):
    """Refcounts: writing the same metrics again and again leaves the interpreter's block count
    where it was (a leaked tuple, row or string per metric would add thousands)."""
    metrics = list(trainvisor.replay(real_logs("caffe") / "bearpaw-fork-mnist.log", year=2020).metrics)
    sink = phase_csv.PhaseCsvSink(tmp_path)
    again = [m._replace(iteration=m.iteration + 1_000_000 * r) for r in range(1, 9) for m in metrics
             if m.iteration is not None]
    _c_write(sink, metrics)
    _c_write(sink, again[:len(again) // 2])
    before = sys.getallocatedblocks()
    _c_write(sink, again[len(again) // 2:])
    after = sys.getallocatedblocks()
    sink.close()
    assert after - before < 200, (before, after)


def test_a_failing_file_write_is_an_error_and_the_sink_goes_on(tmp_path):
    sink = phase_csv.PhaseCsvSink(tmp_path)
    _c_write(sink, [_m("loss", 0.1, 0), _m("loss", 0.2, 1)])  # the file is open, its header written

    class Full:
        def write(self, text):
            raise OSError(28, "No space left on device")

    table = sink._by_phase[("train", None)]
    real = table.fh
    table.fh = Full()
    with pytest.raises(OSError, match="No space left"):
        _c_write(sink, [_m("loss", 0.3, 2), _m("loss", 0.4, 3)])
    table.fh = real
    _c_write(sink, [_m("loss", 0.5, 4)])
    sink.close()
    assert (tmp_path / "train.csv").read_text().splitlines() == ["iteration,epoch,seconds,loss", "0,,,0.1", "3,,,0.4", "4,,,0.5"]


@pytest.mark.parametrize("pure, fast", [("", True), ("1", False)])
def test_the_sink_takes_the_c_loop_unless_told_pure_python(pure, fast):
    env = {**os.environ, "TRAINVISOR_PURE_PYTHON": pure}
    out = subprocess.run([sys.executable, "-c", "from trainvisor.sinks import phase_csv; print(phase_csv._FAST)"],
                         env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    assert out == f"{fast}\n"
