"""Shortcut flags: `--tensorboard DIR`, `--prometheus-port PORT`, `--csv DIR`, `--webhook URL` add their sink to
what the config file names (never replace it) and set one option over the file's own; a real run
with all three writes what each sink writes."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest
import yaml

from .conftest import FAKE_CAFFE, FIXTURES, ROOT

TRAINVISOR = [sys.executable, "-m", "trainvisor"]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINVISOR")}
    env.update(PYTHONPATH=str(ROOT), TRAINVISOR_OFFLINE="1")
    return env


def test_shortcuts_add_to_the_files_sinks_and_keep_its_options(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("sinks:\n  use: [caffe-csv]\n  options:\n    prometheus: {labels: {team: vision}, port: 9000}\n")
    proc = subprocess.run(TRAINVISOR + ["config", "show", "--config", str(cfg), "--prometheus-port", "9100",
                                        "--tensorboard", "tb", "--csv", "tables", "--webhook",
                                        "http://u:secret@127.0.0.1:9/hook", "--mlflow", "http://127.0.0.1:9",
                                        "--", "echo"],
                          capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    sinks = yaml.safe_load(proc.stdout)["sinks"]
    assert sinks["use"] == ["caffe-csv", "tensorboard", "prometheus", "csv", "webhook", "mlflow"]
    assert sinks["options"] == {"prometheus": {"labels": {"team": "vision"}, "port": 9100},
                                "tensorboard": {"dir": "tb"}, "csv": {"dir": "tables"},
                                "webhook": {"url": "http://u:***@127.0.0.1:9/hook"},  # the password masked
                                "mlflow": {"tracking_uri": "http://127.0.0.1:9"}}
    assert "secret" not in proc.stdout


def test_a_bad_port_is_clicks_one_line_error_and_nothing_runs(tmp_path):
    proc = subprocess.run(TRAINVISOR + ["run", "--prometheus-port", "70000", "--", "touch", str(tmp_path / "ran")],
                          capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 2
    assert "--prometheus-port" in proc.stderr and "70000" in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_a_run_with_every_shortcut_writes_each_sinks_output(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    proc = subprocess.run(TRAINVISOR + ["run", "--summary", "--run-dir", "run", "--year", "2026",
                                        "--tensorboard", "tb", "--csv", "tables", "--prometheus-port", "0", "--",
                                        sys.executable, str(FAKE_CAFFE), str(FIXTURES / "logs" / "lenet-newyear.log"),
                                        "--no-snapshots"],
                          cwd=tmp_path, capture_output=True, text=True, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    metrics = [r for r in records if "event" not in r]
    test_acc = [(r["iteration"], r["value"]) for r in metrics if (r["phase"], r["name"]) == ("test", "accuracy")]
    with open(tmp_path / "tables" / "test.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(int(r["iteration"]), float(r["accuracy"])) for r in rows] == test_acc
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [(e.step, round(e.value, 4)) for e in acc.Scalars("test/accuracy")] == test_acc
    summary = proc.stderr[proc.stderr.index("trainvisor summary"):]
    for name in ("tensorboard", "csv", "prometheus"):
        assert f"  sink {name:<9} {len(records)} written" in summary.splitlines()
