"""Each difference README's "Coming from the AVA SDK" lists, shown: where the original lost
snapshots, records or time, the compat layer does not."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from trainvisor.sinks.jsonl import read_jsonl

from .conftest import KODO_AK, KODO_SK, ROOT, real_logs

LOG = "bearpaw-fork-mnist.log"


def _log_lines() -> list[str]:
    return (real_logs("caffe") / LOG).read_text().splitlines(keepends=True)


def _instance(tmp_path: Path, **env: str):
    from trainvisor.compat.ava.train.base import TrainInstance

    full = {"PATH": os.environ.get("PATH", ""), "AVA_WORKSPACE": str(tmp_path / "ws"), **env}
    return TrainInstance("job-m", env=full, log_to_file=False)


def test_a_snapshot_whose_upload_failed_keeps_its_files_and_a_verified_one_is_removed(tmp_path, kodo, monkeypatch,
                                                                                       request):
    """The original deleted the snapshot files after the upload whether it had worked or not."""
    monkeypatch.chdir(tmp_path)
    lines = _log_lines()
    ins = _instance(tmp_path, QINIU_ACCESS_KEY=KODO_AK, QINIU_SECRET_KEY=KODO_SK, QINIU_BUCKET="ckpt",
                    QINIU_UP_HOST=kodo.url, QINIU_RS_HOST=kodo.url)
    request.addfinalizer(lambda: ins.uploads.drain(0))  # closed even when an assertion fails first
    extra = tmp_path / "labels.txt"
    extra.write_text("0 1 2 3 4 5 6 7 8 9\n")
    hook = ins.get_epoch_end_callback("caffe", batch_of_epoch=1000, other_files=[str(extra)])
    ins.uploads.open()  # preflighted before the fault, which then hits the first snapshot file
    kodo.inject("POST", r"^/$", 403)

    def snapshot(at: int, iteration: int) -> list[Path]:
        files = [tmp_path / "examples" / "mnist" / f"lenet_iter_{iteration}.{ext}"
                 for ext in ("caffemodel", "solverstate")]
        files[0].parent.mkdir(parents=True, exist_ok=True)
        for f in files:
            f.write_bytes(os.urandom(64))
        for line in lines[at - 1:at + 2]:  # the two Snapshotting lines, then the next: the files are whole
            hook(line)
        ins.uploads.futures[-1].result(timeout=30)  # resolves once the files are dealt with
        return files

    failed = snapshot(533, 1000)
    assert all(f.exists() for f in failed)  # 403: kept, for a later upload
    verified = snapshot(571, 2000)
    assert not any(f.exists() for f in verified)  # in the store: removed, as AVA did
    assert extra.exists()  # other_files are never removed
    report = ins.done(timeout=30)
    assert report.sets.failed == ("ava/default/models/job-m/snapshot-model-epoch_1.manifest.json",)
    assert report.sets.verified == ("ava/default/models/job-m/snapshot-model-epoch_2.manifest.json",)
    assert len(kodo.read_object("ckpt", "ava/default/models/job-m/epoch_2/lenet_iter_2000.caffemodel")) == 64
    assert "ava/default/models/job-m/epoch_1/lenet_iter_1000.caffemodel" not in kodo.keys("ckpt")


def test_the_upload_token_lives_an_hour_not_60_seconds_and_a_5xx_is_retried(tmp_path, kodo):
    from trainvisor.compat.ava.utils.uploader import Uploader

    model = tmp_path / "model.tar.gz"
    model.write_bytes(os.urandom(5 << 20))  # over 4 MiB: the resumable path, a token per request
    waits: list[float] = []
    up = Uploader(KODO_AK, KODO_SK, "ckpt", env={"QINIU_UP_HOST": kodo.url, "QINIU_RS_HOST": kodo.url},
                  sleep=waits.append)
    kodo.inject("PUT", r"/uploads/", 503)
    obj = up.upload_file(str(model), "ava/default/models/custom/model.tar.gz")
    assert obj.key == "ava/default/models/custom/model.tar.gz" and obj.size == 5 << 20
    assert kodo.read_object("ckpt", obj.key) == model.read_bytes()
    assert len(waits) == 1  # the 503 was retried once, with a backoff
    assert kodo.token_lifetimes and min(kodo.token_lifetimes) > 3600 - 60


_NO_DONE = """
import sys
from trainvisor.compat.ava.train import base as train
ins = train.TrainInstance("job-x", log_to_file=False)
monitor = ins.get_monitor_callback("caffe")
with open(sys.argv[1]) as fh:
    for line in fh:
        monitor(line)
sys.exit(0)  # the script ends without train_ins.done()
"""


def test_records_are_not_lost_when_a_script_ends_without_done(tmp_path):
    """The original's reporter thread died with the script and what it held was lost; here every
    configured sink has every record at exit: the JSONL file, and the parse_log.py tables, which
    are written only when the sink is closed."""
    log = real_logs("caffe") / LOG
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AVA_WORKSPACE": str(tmp_path / "ws"),
           "TRAINVISOR__SINKS__USE": '["caffe-csv"]',
           "TRAINVISOR__SINKS__OPTIONS": '{"caffe-csv": {"outdir": "%s", "basename": "caffe"}}' % tmp_path}
    done = subprocess.run([sys.executable, "-c", _NO_DONE, str(log)], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    from trainvisor import replay

    want = [e.without_wall_time() for e in replay(str(log), parser="caffe").events if hasattr(e, "value")]
    got = read_jsonl(tmp_path / "ws" / "run" / "job-x" / "metrics.jsonl")
    assert [m.without_wall_time() for m in got] == want
    # parse_log.py's own table of this log, row for row
    assert (tmp_path / "caffe.train").read_text().splitlines() == Path(f"{log}.train.csv").read_text().splitlines()


def test_caffe_timestamps_across_new_year_go_forward(tmp_path):
    """glog's lines carry no year: the original took the current year for each line, so a run
    across New Year went back almost a year at midnight. The year is the one the monitor started
    in, advanced when the month goes back."""
    from trainvisor.compat.ava.monitor.reporting import MetricReporter
    from trainvisor.config import SinksConfig

    lines = _log_lines()[499:505]  # iterations 0 and 100: loss, train net output, lr
    heads = ["I1231 23:59:50.000000"] * 3 + ["I0101 00:00:10.000000"] * 3
    started = datetime(2025, 12, 31, 23, 59, 0).timestamp()
    reporter = MetricReporter(tmp_path / "m.jsonl", sinks_config=SinksConfig(), clock=lambda: started)
    for head, line in zip(heads, lines):
        reporter.feed(head + line[len(head):])
    reporter.close()
    assert reporter.year == 2025
    loss = {m.iteration: m for m in read_jsonl(tmp_path / "m.jsonl") if m.name == "loss"}
    assert loss[0].value == 10.0777 and loss[100].value == 0.362464
    assert loss[100].seconds - loss[0].seconds == 20.0
