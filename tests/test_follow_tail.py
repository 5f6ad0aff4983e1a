"""`--follow` across starts: `trainvisor tail` follows metric files too: a sidecar on a caffe log and
mmdetection's real *.log.json beside it reports the file's records next to the log's; a sidecar
started again on the same run directory after the file grew reports only its new lines; so does
`trainvisor run` started again on its run directory."""
from __future__ import annotations

import json
import subprocess
import sys

from trainvisor import RunConfig
from trainvisor.config import LoggingConfig, ParsingConfig, ProcessConfig, RunDirConfig, WatchConfig

from .conftest import real_logs
from .test_follow import expected_mmdet
from .test_tail_library import tail_once


def test_a_sidecar_follows_a_metric_file_beside_the_log_and_a_restart_reports_only_new_lines(tmp_path):
    caffe = (real_logs("caffe") / "bearpaw-fork-mnist.log").read_bytes()
    mmdet = real_logs("mmdetection") / "mmdet2-faster-rcnn-12ep-json.log"
    data = mmdet.read_bytes()
    (tmp_path / "train.log").write_bytes(caffe)
    (tmp_path / "work").mkdir()
    followed = tmp_path / "work" / "run.log.json"
    cut = data.index(b"\n", len(data) // 2) + 1
    followed.write_bytes(data[:cut])
    config = RunConfig(parsing=ParsingConfig(parser="caffe", year=2026), watch=WatchConfig(follow=("work/*.log.json",)),
                       logging=LoggingConfig(quiet=True), run=RunDirConfig(dir=str(tmp_path / "run")),
                       process=ProcessConfig(cwd=str(tmp_path)))
    tail_once(config, tmp_path / "train.log")
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    source = "file:work/run.log.json"
    want = expected_mmdet(data.decode().splitlines(), source)
    first = [(d["name"], d["phase"], d["epoch"], d["iteration"], d["value"], d["line"], d["stream"])
             for d in records if d["stream"] == source]
    assert first == [w for w in want if w[5] <= data[:cut].count(b"\n")] and first
    assert {d["stream"] for d in records} == {"log", source}  # the log's own records stay
    followed.write_bytes(data)
    tail_once(config, tmp_path / "train.log")
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    got = [(d["name"], d["phase"], d["epoch"], d["iteration"], d["value"], d["line"], d["stream"])
           for d in records if d["stream"] == source]
    assert got == want  # every value once, over both sidecars


WRITER = ("import os, sys\n"
          "new = not os.path.exists('m.csv')\n"
          "with open('m.csv', 'a') as fh:\n"
          "    fh.write(('epoch,step,train_loss\\n' if new else '') + sys.argv[1] + '\\n')\n")


def test_trainvisor_run_started_again_on_its_run_dir_reports_only_the_rows_the_file_gained(tmp_path):
    for row in ("0,9,0.5", "1,19,0.25"):
        proc = subprocess.run([sys.executable, "-m", "trainvisor", "run", "-q", "--run-dir", "r", "--follow", "m.csv",
                               "--", sys.executable, "-c", WRITER, row], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [(d["value"], d["epoch"], d["iteration"], d["line"], d["stream"], d["attempt"]) for d in records] == \
        [(0.5, 0.0, 9, 2, "file:m.csv", 1), (0.25, 1.0, 19, 3, "file:m.csv", 2)]
