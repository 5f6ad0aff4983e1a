"""A run directory is never clobbered: one run at a time holds it, and a run that exists is
resumed under its own id with its records kept."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainvisor.errors import ConfigError
from trainvisor.run.rundir import RunDirBusy, RunDirectory

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
CHATTY = "import sys, time\nfor i in range({n}):\n    print(f'step {{i}} loss: {{1/(i+1):.6f}}', flush=True)\n{tail}"


def test_a_second_run_on_a_held_directory_is_refused_and_tears_nothing(tmp_path):
    (tmp_path / "train.py").write_text(CHATTY.format(n=2000, tail="time.sleep(30)"))
    first = subprocess.Popen(TRAINVISOR + ["run", "-q", "--run-dir", "r", "--parser", "generic", "--",
                                           sys.executable, "train.py"], cwd=tmp_path, stdout=subprocess.PIPE)
    metrics = tmp_path / "r" / "metrics.jsonl"
    try:
        # The training's last line, passed through: the first run holds the directory and is writing.
        for _ in range(2000):
            last = first.stdout.readline()
        assert last == b"step 1999 loss: 0.000500\n"
        second = subprocess.run(TRAINVISOR + ["run", "-q", "--run-dir", "r", "--", sys.executable, "-c",
                                              "open('started', 'w')"], cwd=tmp_path, capture_output=True,
                                text=True, timeout=60)
        assert second.returncode == 2
        assert second.stderr == (f"trainvisor: run directory r is in use by another trainvisor (pid {first.pid}); "
                                 "wait for it to end, or give another --run-dir\n")
        assert not (tmp_path / "started").exists()
    finally:
        first.terminate()
        first.wait(timeout=30)
        first.stdout.close()
    records = [json.loads(line) for line in metrics.read_text().splitlines()]  # every line whole
    assert [r["value"] for r in records if r["name"] == "loss"] == [round(1 / (i + 1), 6) for i in range(2000)]


def test_a_rerun_resumes_the_run_id_and_appends_the_metrics(tmp_path):
    (tmp_path / "train.py").write_text(CHATTY.format(n=3, tail=""))
    argv = TRAINVISOR + ["run", "-q", "--run-dir", "r", "--parser", "generic", "--", sys.executable, "train.py"]
    for _ in range(2):
        assert subprocess.run(argv, cwd=tmp_path, timeout=60, capture_output=True).returncode == 0
    identity = json.loads((tmp_path / "r" / "run.json").read_text())
    assert identity["attempt"] == 2
    records = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [r["value"] for r in records] == [1.0, 0.5, 0.333333] * 2  # the first attempt's records are kept
    assert [r["attempt"] for r in records] == [1, 1, 1, 2, 2, 2]
    log = (tmp_path / "r" / "train.log").read_text()
    assert f"run {identity['run_id']} attempt 1 in r" in log and f"run {identity['run_id']} attempt 2 in r" in log


def test_the_lock_goes_with_its_holder_and_ids_must_match(tmp_path):
    d = RunDirectory.open(tmp_path / "r", run_id=None, new_id=lambda: "new-id", clock=lambda: 5.0)
    assert (d.identity.run_id, d.identity.attempt, d.identity.created) == ("new-id", 1, 5.0)
    with pytest.raises(RunDirBusy, match="in use by another trainvisor"):
        RunDirectory.open(tmp_path / "r", run_id=None, new_id=lambda: "x")
    d.close()
    with pytest.raises(ConfigError, match="belongs to run 'new-id', not 'other'"):
        RunDirectory.open(tmp_path / "r", run_id="other", new_id=lambda: "x")
    again = RunDirectory.open(tmp_path / "r", run_id="new-id", new_id=lambda: "x")
    assert (again.identity.run_id, again.identity.attempt) == ("new-id", 2)
    again.close()


def test_resume_of_a_directory_that_is_no_run_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = subprocess.run(TRAINVISOR + ["resume", "empty"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == "trainvisor: empty is not a trainvisor run directory (no run.json)\n"
