"""`trainvisor run` passes every byte through and yields the same metrics as `replay`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainvisor.events import Metric
from trainvisor.run.endwarnings import no_metrics_warning

from .conftest import FAKE_CAFFE, FIXTURES, REAL_LOGS

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
# Every real log of every framework (../shared/real-logs): a live run of a training that prints it
# and a replay of it go through one drive loop, so they must give the same records.
REAL = sorted(REAL_LOGS.rglob("*.log")) if REAL_LOGS.is_dir() else []
LOGS = [FIXTURES / "logs" / "lenet-newyear.log"] + REAL


def read_metrics(path: Path, streams: set | None = None) -> list[tuple]:
    """The records that must agree between run and replay; `streams` collects what they say of their stream
    (a run's glog lines come from stderr, a replay reads one file: ``log``)."""
    out = []
    for line in path.read_text().splitlines():
        d = json.loads(line)
        d.pop("attempt", None)  # run metadata, like wall_time: which start on the run directory wrote it
        if streams is not None:
            streams.add(d["stream"])
        if "event" in d:
            d.pop("wall_time")
            d.pop("stream")
            out.append(("checkpoint", tuple(sorted(d.items()))))
        else:
            m = Metric.from_json_dict(d).without_wall_time()
            out.append(m if m[1] == m[1] else (*m[:1], "nan", *m[2:]))  # NaN equals NaN here: the same record
    return out


# The stream each framework's training writes its metrics to (glog, Python's logging, YOLO's tqdm
# rows: stderr; Keras, Lightning's bars, the Trainer's dicts (tqdm.write), detectron2's logger,
# darknet's printf, a script's prints: stdout), as the fake training plays it. Logs in no known
# format go to stdout, where a script's prints go.
STDOUT_FRAMEWORKS = {"keras", "detectron2", "pytorch", "lightning", "huggingface", "darknet"}
NO_KNOWN_FORMAT = {"ducha-adaadam-libcudart-error.log", "detr-log-jsonl.log", "xlnet-ner-custom-crlf.log"}


def expected_stream(log: Path) -> str:
    return "stdout" if log.parent.name in STDOUT_FRAMEWORKS or log.name in NO_KNOWN_FORMAT else "stderr"


def written_file(snap: Path, record: dict) -> Path:
    """Where the fake training writes an announced save: under its --snapshot-dir, an absolute
    path re-rooted there; TensorFlow's `model.ckpt-N` is a prefix (`.index` is one of its files)."""
    p = snap / os.path.normpath(record["path"]).lstrip("/")
    return p.with_name(p.name + ".index") if record["kind"] == "ckpt" and p.suffix != ".ckpt" else p


@pytest.mark.parametrize("log", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_run_and_replay_give_identical_records_and_bytes_pass_through(log, tmp_path, fake_training, replay_log):
    """The fake training of every real log, run by trainvisor, gives the records a replay of the
    log gives, its bytes pass through unchanged, and the checkpoints it announces are written."""
    live = tmp_path / "live.jsonl"
    replayed = tmp_path / "replay.jsonl"
    proc = subprocess.run(
        TRAINVISOR + ["run", "--year", "2026", "--metrics", str(live), "--run-dir", str(tmp_path / "run"),
                      "--", *fake_training(log, snapshot_dir=tmp_path / "snap")],
        capture_output=True, cwd=tmp_path, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    training = log.read_bytes()
    stream = expected_stream(log)
    out, err = (proc.stdout, proc.stderr) if stream == "stdout" else (proc.stderr, proc.stdout)
    assert out[:len(training)] == training  # the stream the framework writes: every byte, unchanged
    said = out[len(training):] if stream == "stderr" else proc.stderr  # then trainvisor's own warning, if any
    assert err == (b"" if stream == "stderr" else said)  # nothing of the training on the other stream
    replay_log(log, year=2026, metrics=replayed)
    live_streams, replay_streams = set(), set()
    live_records = read_metrics(live, live_streams)
    assert live_records == read_metrics(replayed, replay_streams)
    assert live_streams <= {stream} and replay_streams <= {"log"}
    if log.parent == FIXTURES / "logs" or (log.parent.name == "caffe" and "adaadam" not in log.name):
        assert live_records, "a training log must yield metrics"
    lines = training.count(b"\n") + (not training.endswith(b"\n"))
    assert said == (b"" if live_records else f"trainvisor: {no_metrics_warning(lines, 'auto')}\n".encode())
    snap = tmp_path / "snap"
    for record in (dict(r[1]) for r in live_records if r[0] == "checkpoint"):
        assert written_file(snap, record).is_file(), record


def test_fixture_run_writes_the_announced_snapshots(tmp_path):
    log = FIXTURES / "logs" / "lenet-newyear.log"
    subprocess.run(
        TRAINVISOR + ["run", "--run-dir", str(tmp_path / "run"), "--",
                      sys.executable, str(FAKE_CAFFE), str(log), "--snapshot-size", "4096"],
        capture_output=True, cwd=tmp_path, timeout=60, check=True,
    )
    snaps = sorted(p.name for p in (tmp_path / "examples" / "mnist").iterdir())
    assert snaps == sorted(f"lenet_iter_{i}.{ext}" for i in (250, 500, 750, 1000) for ext in ("caffemodel", "solverstate"))
    assert all((tmp_path / "examples" / "mnist" / s).stat().st_size == 4096 for s in snaps)
    records = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["path"] for r in records if r.get("event") == "checkpoint"][-1] == "examples/mnist/lenet_iter_1000.solverstate"


def test_replay_into_a_reader_that_stops_early_is_quiet(tmp_path):
    big = tmp_path / "big.log"
    big.write_bytes((FIXTURES / "logs" / "lenet-newyear.log").read_bytes() * 300)
    proc = subprocess.run(f"{sys.executable} -m trainvisor replay --parser caffe {big} | head -1",
                          shell=True, capture_output=True, timeout=60, executable="/bin/bash")
    assert proc.stdout.count(b"\n") == 1 and b'"name": "accuracy"' in proc.stdout
    assert proc.stderr == b""


@pytest.mark.parametrize("name", ["lightning-rich.log", "keras-every-step.log", "tqdm-cr.log", "lenet-newyear.log"])
def test_every_replayed_record_says_it_came_from_the_log(name):
    """Records a parser releases only at the end (a Rich bar waiting for its continuation lines,
    Keras's last epoch) are the log's like the rest: the README's `"stream": "log"` for a replay."""
    out = subprocess.run([sys.executable, "-m", "trainvisor", "replay", str(FIXTURES / "logs" / name)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    streams = [json.loads(line)["stream"] for line in out.splitlines()]
    assert streams and set(streams) == {"log"}
