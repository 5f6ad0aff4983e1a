"""A third-party sink as a user installs it: a tiny package with an entry point in the group
`trainvisor.sinks`, installed by pip (into a --target directory on PYTHONPATH, no network),
named in a YAML config, receives every metric of a run; a misspelled name or a sink class
without `write` is one line and exit 2, before the child starts."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import FAKE_CAFFE, ROOT

PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "tv-record-sink"
version = "0.1"

[project.entry-points."trainvisor.sinks"]
record-metrics = "tv_record_sink:RecordSink"
no-write = "tv_record_sink:NoWrite"
"""

MODULE = '''\
"""Writes each metric it is given as one JSON line: what a sink of a metrics service sends."""
import json


class RecordSink:
    name = "record"

    def __init__(self, path, fields=("name", "value", "iteration", "phase")):
        self.fields = tuple(fields)
        self.fh = open(path, "w")

    def write(self, events):
        for ev in events:
            if type(ev).__name__ == "Metric":
                self.fh.write(json.dumps({f: getattr(ev, f) for f in self.fields}) + "\\n")

    def flush(self):
        self.fh.flush()

    def close(self):
        self.fh.close()


class NoWrite:
    name = "no-write"

    def flush(self):
        pass

    def close(self):
        pass
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The package, built and installed by pip into a directory (removed with tmp_path)."""
    src = tmp_path_factory.mktemp("tv-record-sink")
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "tv_record_sink.py").write_text(MODULE)
    target = src / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--isolated", "--quiet", "--no-deps",
                           "--no-build-isolation", "--no-index", "--no-cache-dir", "--target", str(target), str(src)],
                          capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 0, proc.stderr
    assert (target / "tv_record_sink-0.1.dist-info" / "entry_points.txt").is_file()
    return target


def _env(site: Path | None = None) -> dict[str, str]:
    path = [str(ROOT)] + ([str(site)] if site else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINVISOR", "PIP_"))}
    return {**env, "PYTHONPATH": os.pathsep.join(path), "LC_ALL": "C.UTF-8", "COLUMNS": "200"}


def _run(tmp_path: Path, site: Path, config: str, *command: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "run.yaml"
    cfg.write_text(textwrap.dedent(config))
    return subprocess.run([sys.executable, "-m", "trainvisor", "run", "--config", str(cfg), "--summary",
                           "--year", "2026", "--parser", "caffe", "--run-dir", str(tmp_path / "run"), "--", *command],
                          capture_output=True, text=True, timeout=120, env=_env(site), cwd=tmp_path)


def test_an_installed_sink_named_in_yaml_receives_every_metric_of_the_run(tmp_path, installed):
    got = tmp_path / "got.jsonl"
    proc = _run(tmp_path, installed, f"""\
        sinks:
          use: [record-metrics]
          options:
            record-metrics: {{path: {json.dumps(str(got))}}}
        """, sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots")
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    expected = [{k: r[k] for k in ("name", "value", "iteration", "phase")} for r in records if "event" not in r]
    received = [json.loads(line) for line in got.read_text().splitlines()]
    assert len(expected) == 91  # the metrics of fake-caffe's generated log, as the run's own JSONL holds them
    assert received == expected
    summary = proc.stderr[proc.stderr.index("trainvisor summary"):].splitlines()
    assert f"  sink jsonl     {len(records)} written" in summary  # metrics and checkpoint announcements
    assert f"  sink record-metrics {len(records)} written" in summary  # on its own thread: nothing dropped


@pytest.mark.parametrize("name, message", [
    ("record-metric", "trainvisor: unknown sink 'record-metric' (did you mean 'record-metrics'?)"),
    ("no-write", "trainvisor: sink 'no-write': class NoWrite has no method write()"),
])
def test_a_misspelled_or_malformed_sink_is_one_line_and_the_child_never_starts(tmp_path, installed, name, message):
    marker = tmp_path / "started"
    proc = _run(tmp_path, installed, f"sinks: {{use: [{name}]}}\n",
                sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [message]
    assert not marker.exists()
