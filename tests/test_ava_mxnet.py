"""MXNet's callbacks without MXNet: a small fake of `Module.fit` calls them as fit does (a
`BatchEndParam` after every batch, `epoch_end_callback(epoch, symbol, arg, aux)` after
`do_checkpoint` wrote the epoch's files), playing the values a real MXNet run logged. The monitor
reports them through the sinks; each epoch's checkpoint is uploaded as that epoch's set."""
from __future__ import annotations

import json
import math
import re
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from trainvisor.sinks.jsonl import read_jsonl

from .conftest import real_logs

BatchEndParam = namedtuple("BatchEndParam", ["epoch", "nbatch", "eval_metric", "locals"])
SPEEDOMETER = re.compile(r"Epoch\[(\d+)\] Batch \[(\d+)\]\tSpeed: ([\d.]+) samples/sec\taccuracy=([\d.]+)")
BATCH_SIZE, FREQUENT, BATCHES = 32, 20, 625  # the run's arguments: batch_size=32, disp_batches=20, 20000 examples


def _logged() -> dict[tuple[int, int], tuple[float, float]]:
    """(epoch, batch) -> (speed, accuracy), as the run's Speedometer printed them."""
    text = (real_logs("mxnet") / "ouyangchao-mxnet-cls.log").read_text()
    return {(int(e), int(b)): (float(s), float(a)) for e, b, s, a in SPEEDOMETER.findall(text)}


class _Accuracy:
    """An eval metric with `get_name_value()`, holding what the log printed (NaN between)."""

    def __init__(self) -> None:
        self.value = math.nan

    def get_name_value(self):
        return [("accuracy", self.value)]


def _fake_fit(logged, batch_end_callback, epoch_end_callback, snapshot_dir: Path, clock: list) -> None:
    """What `Module.fit` does around its callbacks, without a network: batches, then the
    epoch's checkpoint (`mx.callback.do_checkpoint`'s two files), then the epoch-end callbacks."""
    metric = _Accuracy()
    epochs = sorted({e for e, _ in logged})
    for epoch in epochs:
        for nbatch in range(BATCHES):
            speed, accuracy = logged.get((epoch, nbatch), (None, math.nan))
            if speed is not None:  # the batches since the last report took what the log's speed says
                clock[0] += FREQUENT * BATCH_SIZE / speed
            metric.value = accuracy
            for cb in batch_end_callback:
                cb(BatchEndParam(epoch=epoch, nbatch=nbatch, eval_metric=metric, locals={}))
        (snapshot_dir / "img_cls-symbol.json").write_text(json.dumps({"nodes": [], "epoch": epoch}))
        (snapshot_dir / f"img_cls-{epoch + 1:04d}.params").write_bytes(bytes(64) + bytes([epoch]))
        epoch_end_callback(epoch, None, {}, {})


def test_fit_callbacks_report_the_logged_values_and_upload_each_epoch(tmp_path, monkeypatch):
    from trainvisor.compat.ava.monitor import mxnet
    from trainvisor.compat.ava.train.base import TrainInstance

    store = tmp_path / "store"
    ins = TrainInstance("mx-1", env={"AVA_WORKSPACE": str(tmp_path / "ws"), "TRAINVISOR_UPLOAD_TO": store.as_uri()},
                        log_to_file=False)
    clock = [1000.0]
    monitor = mxnet.BatchEndMonitor(ins.reporter(), BATCH_SIZE, FREQUENT, batches_per_epoch=BATCHES,
                                    clock=lambda: clock[0])
    epoch_end = ins.get_epoch_end_callback("mxnet", batch_of_epoch=BATCHES)
    logged = _logged()
    assert len(logged) == 310  # 10 epochs, 31 reports each
    _fake_fit(logged, [monitor], epoch_end, Path(ins.get_snapshot_base_path()), clock)
    report = ins.done(timeout=60)

    records = read_jsonl(Path(ins.get_base_path()) / "metrics.jsonl")
    accuracy = {(int(m.epoch), m.iteration - int(m.epoch) * BATCHES): m.value for m in records if m.name == "accuracy"}
    assert accuracy == {k: acc for k, (_, acc) in logged.items()}
    speed = {(int(m.epoch), m.iteration - int(m.epoch) * BATCHES): m.value
             for m in records if m.name == "samples_per_sec"}
    # the interval since the report before (batch 0's for batch 20) gives the speed the log printed
    assert speed == pytest.approx({k: s for k, (s, _) in logged.items()}, rel=1e-9)
    assert {m.phase for m in records} == {"train"}
    assert len(report.sets.verified) == 10 and not report.sets.failed
    for epoch in range(1, 11):
        folder = store / "mx-1" / f"epoch_{epoch}"
        assert (folder / f"img_cls-{epoch:04d}.params").read_bytes() == bytes(64) + bytes([epoch - 1])
        assert json.loads((folder / "img_cls-symbol.json").read_text())["epoch"] == epoch - 1


def test_the_monitor_module_imports_no_mxnet_and_a_failing_metric_never_reaches_fit(tmp_path, caplog):
    from trainvisor.compat.ava.monitor import mxnet
    from trainvisor.compat.ava.monitor.reporting import MetricReporter
    from trainvisor.config import SinksConfig

    assert "mxnet" not in sys.modules
    reporter = MetricReporter(tmp_path / "m.jsonl", sinks_config=SinksConfig())

    class Broken:
        def get_name_value(self):
            raise RuntimeError("metric not updated")

    cb = mxnet.batch_end_callback_builder(BATCH_SIZE, FREQUENT, instance=_Holder(reporter))[0]
    cb(BatchEndParam(epoch=0, nbatch=0, eval_metric=Broken(), locals={}))  # logged, not raised
    reporter.close()
    assert "the MXNet batch-end monitor failed" in caplog.text
    assert read_jsonl(tmp_path / "m.jsonl") == []


class _Holder:
    """What `batch_end_callback_builder` asks of a training instance: its reporter."""

    def __init__(self, reporter) -> None:
        self._reporter = reporter

    def reporter(self):
        return self._reporter
