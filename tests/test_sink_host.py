"""The sink host (trainvisor/sinks/host/): a real `trainvisor run` over fake-caffe replaying a real
Caffe log, with TensorBoard, the per-phase CSV, a webhook and MLflow run in the host's process;
each read back with its consumer's own tool and compared with metrics.jsonl; the host gone after
the run; trainvisor SIGKILLed mid-run (the host finishes the file and exits); a host killed
mid-run (the training goes on, the summary says so in one line)."""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from trainvisor.sinks.jsonl import read_jsonl

from .conftest import FAKE_CAFFE, ROOT, real_logs
from .scalar_helpers import expected_scalars
from .test_sink_webhook import Receiver

psutil = pytest.importorskip("psutil")
pytest.importorskip("tensorboardX", reason="the tensorboard sink writes with tensorboardX")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
mlflow_client = pytest.importorskip("mlflow.tracking", reason="the mlflow sink needs mlflow")

LOG = "bearpaw-fork-mnist.log"  # 101 displayed iterations, 21 tests


def _log_metrics() -> int:
    """The metrics a reader of the log counts: each test and train net output, each `lr = `, each
    `Iteration N, loss = ` (343 in this log: one display lacks its train net output)."""
    text = (real_logs("caffe") / LOG).read_text()
    return sum(len(re.findall(p, text)) for p in (r"Test net output", r"Train net output", r", lr = ",
                                                  r"Iteration \d+, loss = "))


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.down()


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRAINVISOR", "MLFLOW")) and "proxy" not in k.lower()}
    env.update(PYTHONPATH=str(ROOT), LC_ALL="C.UTF-8", COLUMNS="120", TZ="UTC", MLFLOW_ALLOW_FILE_STORE="true")
    for k in ("LINES", "TERM", "NO_COLOR", "FORCE_COLOR", "PYTHONIOENCODING"):
        env.pop(k, None)
    return env


def _config(tmp_path: Path, url: str, use=("tensorboard", "csv", "webhook", "mlflow")) -> Path:
    options = {"tensorboard": f"{{dir: '{tmp_path}/tb'}}", "csv": f"{{dir: '{tmp_path}/csv'}}",
               "webhook": f"{{url: '{url}'}}", "mlflow": f"{{tracking_uri: 'file:{tmp_path}/mlruns'}}"}
    path = tmp_path / "run.yaml"
    path.write_text(f"sinks:\n  host: on\n  close_timeout: 60\n  use: [{', '.join(use)}]\n  options:\n"
                    + "".join(f"    {n}: {options[n]}\n" for n in use))
    return path


def _argv(tmp_path: Path, cfg: Path, *fake: str) -> list[str]:
    return [sys.executable, "-m", "trainvisor", "run", "--config", str(cfg), "--summary", "--year", "2020",
            "--parser", "caffe", "--run-dir", str(tmp_path / "run"), "--",
            sys.executable, str(FAKE_CAFFE), str(real_logs("caffe") / LOG), "--no-snapshots", *fake]


def _host_pid(run_dir: Path) -> int:
    found = re.search(r"sink host started \(pid (\d+)\)", (run_dir / "train.log").read_text())
    assert found, "the run log names the sink host's pid"
    return int(found.group(1))


def _cells(d: Path) -> Counter:
    """(phase, iteration, name, value) of every filled cell of the per-phase CSV files."""
    got: Counter = Counter()
    for p in d.glob("*.csv"):
        for row in csv.DictReader(p.open(newline="", encoding="utf-8")):
            for name, v in row.items():
                if name not in ("iteration", "epoch", "seconds", "rank") and v != "":
                    got[(p.stem, int(row["iteration"]), name, float(v))] += 1
    return got


def _want_cells(metrics: list) -> Counter:
    return Counter((m.phase, m.iteration, m.name, m.value) for m in metrics if not m.running)


def _tensorboard(d: Path) -> dict:
    acc = event_accumulator.EventAccumulator(str(d), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def _f32(v: float) -> float:
    import struct

    return struct.unpack("f", struct.pack("f", v))[0]


def test_a_hosted_run_gives_every_sink_every_record_and_leaves_no_host(tmp_path, receiver, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow's client reads the local store back
    proc = subprocess.run(_argv(tmp_path, _config(tmp_path, receiver.url)), capture_output=True, text=True,
                          env=_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run_dir = tmp_path / "run"
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert len(metrics) == _log_metrics() == 343
    # TensorBoard: every scalar, as float32, at its step
    assert _tensorboard(tmp_path / "tb") == expected_scalars(metrics, _f32)
    # CSV: every completed metric in its phase file's row and column
    assert _cells(tmp_path / "csv") == _want_cells(metrics)
    # webhook: every record of the file, in order
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines if '"event"' not in x]
    keep = lambda r: {k: v for k, v in r.items() if k not in ("wall_time", "stream", "attempt")}  # noqa: E731
    assert [keep(r) for r in receiver.items("metrics")] == [keep(r) for r in records]
    # MLflow: the client reads every metric back, and the run's status
    client = mlflow_client.MlflowClient(tracking_uri=f"file:{tmp_path}/mlruns")
    (run,) = client.search_runs([client.get_experiment_by_name("trainvisor").experiment_id])
    got = {k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)] for k in run.data.metrics}
    want = expected_scalars(metrics)
    assert {k: sorted(v) for k, v in got.items()} == \
        {k: sorted(v) for k, v in want.items()}
    assert run.info.status == "FINISHED"
    # the summary lists the hosted sinks as before, each with every record the file holds
    for name in ("tensorboard", "csv", "webhook", "mlflow"):
        assert re.search(rf"sink {name}\s+{len(lines)} written\n", proc.stderr), proc.stderr[-1500:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [s["name"] for s in summary["sinks"]] == ["jsonl", "tensorboard", "csv", "webhook", "mlflow"]
    assert not psutil.pid_exists(_host_pid(run_dir))


def test_trainvisor_killed_mid_run_leaves_a_host_that_finishes_the_file_and_exits(tmp_path, receiver):
    cfg = _config(tmp_path, receiver.url, use=("tensorboard",))
    proc = subprocess.Popen(_argv(tmp_path, cfg, "--rate", "200"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=_env(), cwd=tmp_path, start_new_session=True)
    try:
        seen = 0
        for line in proc.stdout:  # the training's lines, passed through: wait for 60 test outputs' worth
            seen += b"Iteration" in line
            if seen >= 60:
                break
        host = psutil.Process(_host_pid(tmp_path / "run"))
        proc.kill()
        proc.wait(30)
        host.wait(60)  # stdin's end: it reads what the file holds, closes its sinks and exits (raises if not)
        assert not psutil.pid_exists(host.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        proc.stdout.close()
        with pytest.raises(ProcessLookupError):  # the training went with trainvisor (its death watcher)
            _end_group(proc.pid)
    metrics = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert 0 < len(metrics) < _log_metrics()
    assert _tensorboard(tmp_path / "tb") == expected_scalars(metrics, _f32)


def _end_group(pgid: int) -> None:
    """Ends what is left of the run's process group; ProcessLookupError when nothing is."""
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(10)
                return
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    raise ProcessLookupError(pgid)


def test_a_host_that_dies_leaves_the_training_running_and_the_summary_says_so(tmp_path, receiver):
    cfg = _config(tmp_path, receiver.url, use=("tensorboard", "webhook"))
    proc = subprocess.Popen(_argv(tmp_path, cfg, "--rate", "400"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env(), cwd=tmp_path)
    try:
        for line in proc.stderr:  # the training's lines: a few, then the host is killed
            if b"Iteration 100," in line:
                break
        host = psutil.Process(_host_pid(tmp_path / "run"))
        host.kill()  # a zombie until the run waits for it at its end
        rest = proc.stderr.read().decode()
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        proc.stderr.close()
        proc.stdout.close()
    metrics = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert len(metrics) == _log_metrics()  # the training went on to its end, parsed
    warned = [x for x in rest.splitlines() if "sink host" in x]
    assert len(warned) == 1 and "exited with code -9 before it reported" in warned[0], rest[-1500:]
    n = len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
    for name in ("tensorboard", "webhook"):
        assert re.search(rf"sink {name}\s+0 written, {n} failed \(see the run log\)\n", rest), rest[-1500:]


@pytest.mark.parametrize("host", ["on", "off"])
def test_two_sinks_of_one_name_are_counted_under_the_same_labels_hosted_or_not(tmp_path, host):
    """The run labels a second sink of one name `NAME#N`; the host reports under the run's labels,
    so each hosted sink is found by its own label (not the first one's counts twice)."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"sinks:\n  host: {host}\n  close_timeout: 60\n  use: [csv, csv]\n"
                   f"  options:\n    csv: {{dir: '{tmp_path}/csv'}}\n")
    done = subprocess.run(_argv(tmp_path, cfg), env=_env(), capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    counts = {s["name"]: (s["written"], s["dropped"], s["failed"]) for s in summary["sinks"]}
    n = counts["jsonl"][0]
    assert n >= _log_metrics()
    assert counts == {"jsonl": (n, 0, 0), "csv": (n, 0, 0), "csv#3": (n, 0, 0)}
    said = (tmp_path / "run" / "train.log").read_text()
    assert ("sink host started" in said) == (host == "on")
