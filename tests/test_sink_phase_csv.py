"""The `csv` sink: real logs replayed through it, its files read back with the csv module against
metrics.jsonl: every completed (non-running) metric in its phase's file, in the row of its
iteration and epoch, with its exact value; headers as the names first came; a name that first
comes late widens the file without losing a row."""
from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

import trainvisor
from trainvisor.errors import ConfigError
from trainvisor.sinks.jsonl import read_jsonl
from trainvisor.sinks.registry import get_sink_info, make_sink

from .conftest import FIXTURES, real_logs


def _replay(log: Path, tmp_path: Path, **kw) -> list:
    info, sink = make_sink("csv", {"dir": str(tmp_path / "csv")})
    assert info.inline
    trainvisor.replay(log, year=2020, metrics=tmp_path / "m.jsonl", sinks=[sink], keep_events=False, **kw)
    return [e for e in read_jsonl(tmp_path / "m.jsonl") if isinstance(e, trainvisor.Metric)]


def _tables(d: Path) -> dict[str, list[list[str]]]:
    return {p.stem: list(csv.reader(p.open(newline="", encoding="utf-8"))) for p in sorted(d.glob("*.csv"))}


def _cells(tables: dict) -> Counter:
    """(file, iteration, epoch, rank, name, value) of every filled metric cell."""
    got: Counter = Counter()
    for stem, rows in tables.items():
        header = rows[0]
        for row in rows[1:]:
            assert len(row) == len(header), stem
            r = dict(zip(header, row))
            key = (stem, int(r["iteration"]) if r["iteration"] else None,
                   float(r["epoch"]) if r["epoch"] else None, int(r["rank"]) if r.get("rank") else None)
            for name in header[3:]:
                if name != "rank" and r[name] != "":
                    got[(*key, name, repr(float(r[name])))] += 1
    return got


def _want(metrics: list) -> Counter:
    return Counter((m.phase + (str(m.test_net) if m.test_net else ""), m.iteration,
                    None if m.epoch is None else float(m.epoch), m.rank, m.name, repr(m.value))
                   for m in metrics if not m.running)


@pytest.mark.parametrize("framework, log, rows, headers", [
    # Caffe: 101 displayed iterations (one lacks its `loss` line), 21 tests; seconds from glog's clock
    ("caffe", "bearpaw-fork-mnist.log", {"train": 101, "test": 21},
     {"train": ["total_loss", "loss", "lr"], "test": ["accuracy", "loss"]}),
    # Keras 2: one row per epoch and phase
    ("keras", "esartic-sound-cnn-30ep.log", {"train": 300, "val": 300},
     {"train": ["loss", "acc"], "val": ["loss", "acc"]}),
    # Keras 1, two trainings in one log: the epochs come again, as rows of their own
    ("keras", "kanji-keras1-verbose2-50ep.log", {"train": 66, "val": 33},
     {"train": ["loss", "acc"], "val": ["loss", "acc"]}),
    # detectron2: 4628 logged iterations, one final evaluation
    ("detectron2", "bupt-d2-faster-c4.log", {"train": 4628, "val": 1},
     {"train": ["total_loss", "loss_cls", "loss_box_reg", "loss_rpn_cls", "loss_rpn_loc", "time", "data_time", "lr"],
      "val": ["bbox/AP", "bbox/AP50", "bbox/AP75", "bbox/APs", "bbox/APm", "bbox/APl"]}),
])
def test_every_completed_metric_is_in_its_phase_file_row_and_column(tmp_path, framework, log, rows, headers):
    metrics = _replay(real_logs(framework) / log, tmp_path)
    tables = _tables(tmp_path / "csv")
    assert {k: len(v) - 1 for k, v in tables.items()} == rows
    assert {k: v[0][3:] for k, v in tables.items()} == headers
    assert all(v[0][:3] == ["iteration", "epoch", "seconds"] for v in tables.values())
    assert _cells(tables) == _want(metrics)


def test_caffe_rows_hold_the_iteration_and_the_seconds_of_their_lines(tmp_path):
    _replay(real_logs("caffe") / "bearpaw-fork-mnist.log", tmp_path)
    test = _tables(tmp_path / "csv")["test"]
    # "Iteration 0, Testing net (#0)" ... "accuracy = 0.0756", "loss = 2.33...": one row
    assert test[1][:4] == ["0", "", "0.13616", "0.0756"]
    assert test[-1][0] == "10000"


def test_running_values_stay_out_of_the_tables(tmp_path):
    # Keras 3 progress bars: 5760 mid-epoch values, none of them in a row
    metrics = _replay(real_logs("keras") / "keras3-utf16le-ansi.log", tmp_path)
    assert sum(m.running for m in metrics) == 5760
    tables = _tables(tmp_path / "csv")
    assert {k: len(v) - 1 for k, v in tables.items()} == {"train": 60, "val": 60}
    assert _cells(tables) == _want(metrics)


@pytest.mark.parametrize("framework, log, phase, late", [
    # DETR's MetricLogger: the COCO evaluation's bbox/* columns come with the first evaluation
    ("pytorch", "detr-metriclogger-ddp.log", "val", "bbox/AP"),
    # the HF Trainer's end-of-training dict brings train_runtime after 19 logged steps
    ("huggingface", "eshaubale-hf-trainer-padded.log", "train", "train_runtime"),
])
def test_a_name_that_comes_late_widens_the_file_and_keeps_every_row(tmp_path, framework, log, phase, late):
    metrics = _replay(real_logs(framework) / log, tmp_path)
    tables = _tables(tmp_path / "csv")
    assert _cells(tables) == _want(metrics)
    header, first = tables[phase][0], tables[phase][1]
    assert late in header and first[header.index(late)] == ""
    assert not (tmp_path / "csv" / f"{phase}.csv.tmp").exists()


def test_the_file_is_a_whole_table_while_the_run_writes_it(tmp_path):
    metrics = trainvisor.replay(real_logs("huggingface") / "eshaubale-hf-trainer-padded.log", year=2020).metrics
    cut = next(i for i, m in enumerate(metrics) if m.name == "train_runtime")
    sink = make_sink("csv", {"dir": str(tmp_path)})[1]
    sink.write(metrics[:cut])
    sink.flush()
    before = _tables(tmp_path)["train"]
    assert "train_runtime" not in before[0] and len(before) > 1
    sink.write(metrics[cut:])
    sink.close()
    after = _tables(tmp_path)["train"]
    assert after[0][:len(before[0])] == before[0]  # the new columns come after the old
    assert [row[:len(before[0])] for row in after[1:len(before)]] == before[1:]
    assert _cells({"train": after}) == Counter({k: v for k, v in _want(metrics).items() if k[0] == "train"})


def test_ranks_get_a_rank_column_and_rows_of_their_own(tmp_path):
    metrics = _replay(FIXTURES / "logs" / "ranks-torchrun-tee.log", tmp_path, ranks="all")
    tables = _tables(tmp_path / "csv")
    assert tables["train"][0] == ["iteration", "epoch", "seconds", "rank", "loss"]
    assert tables["train"][1:3] == [["0", "1", "", "0", "2.30576"], ["0", "1", "", "1", "2.298311"]]
    assert _cells(tables) == _want(metrics)


def test_registered_with_a_required_dir():
    assert get_sink_info("csv").inline
    with pytest.raises(ConfigError) as err:
        make_sink("csv", {})
    assert "needs option `dir` (sinks.options.csv.dir)" in str(err.value) and "\n" not in str(err.value)
