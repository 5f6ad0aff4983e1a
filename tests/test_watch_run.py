"""`trainvisor run` with checkpoint watching: the solver's snapshot directory is
watched without being told, every snapshot is recorded complete, and the
training's output is byte-identical to a run without watching."""
from __future__ import annotations

import json
import subprocess
import sys

from .conftest import FAKE_CAFFE

TRAINVISOR = [sys.executable, "-m", "trainvisor"]


def _run(tmp_path, name, *opts):
    """Each run in its own working directory, with the same solver."""
    cwd = tmp_path / name
    cwd.mkdir()
    (cwd / "solver.prototxt").write_text('snapshot: 100\nsnapshot_prefix: "snaps/lenet"\n')
    return subprocess.run(
        TRAINVISOR + ["run", "--run-dir", str(cwd / "run"), *opts, "--", sys.executable, str(FAKE_CAFFE),
                      "train", "-solver", "solver.prototxt", "--generate", "1000", "--snapshot-size", str(1 << 20)],
        capture_output=True, cwd=cwd, timeout=60)


def test_caffe_run_records_every_snapshot_complete_and_output_is_unchanged(tmp_path):
    plain = _run(tmp_path, "plain", "--no-solver-watch")
    watched = _run(tmp_path, "watched", "--upload-policy", "all", "--iters-per-epoch", "200")
    assert plain.returncode == watched.returncode == 0, watched.stderr[-2000:]
    assert watched.stderr == plain.stderr and watched.stdout == plain.stdout
    assert not (tmp_path / "plain" / "run" / "checkpoints.jsonl").exists()
    # Sorted: snapshots written before the new snapshot directory's watch existed complete
    # by settling, later than the ones whose close was seen.
    records = sorted((json.loads(x) for x in (tmp_path / "watched" / "run" / "checkpoints.jsonl").read_text().splitlines()),
                     key=lambda r: r["iteration"])
    assert [r["iteration"] for r in records] == list(range(100, 1001, 100))
    assert [r["epoch"] for r in records] == [i / 2 for i in range(1, 11)]
    for r in records:
        assert sorted(f["relpath"] for f in r["files"]) == [f"lenet_iter_{r['iteration']}.{ext}"
                                                            for ext in ("caffemodel", "solverstate")]
        assert all(f["size"] == 1 << 20 for f in r["files"])


def test_bad_upload_policy_is_one_line_before_the_training_starts(tmp_path):
    proc = subprocess.run(TRAINVISOR + ["run", "--run-dir", str(tmp_path / "r"), "--watch", "w",
                                        "--upload-policy", "sometimes", "--", sys.executable, "-c",
                                        "open('started', 'w')"],
                          capture_output=True, cwd=tmp_path, timeout=60)
    assert proc.returncode != 0
    err = proc.stderr.decode().strip().splitlines()
    assert err == ["trainvisor: --upload-policy: watch.policy: must be all, epoch-end, every-N (e.g. every-5) "
                   "or last (got 'sometimes')"]
    assert not (tmp_path / "started").exists()


def test_polled_caffe_snapshots_complete_from_the_log_not_the_settle_time(tmp_path):
    """Settle 120 s and a 60 s limit: the run can only finish because Caffe's
    announcements proved every file (the watcher's summary in the run log says so)."""
    proc = _run(tmp_path, "polled", "--poll", "--settle", "120")
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = (tmp_path / "polled" / "run" / "checkpoints.jsonl").read_text().splitlines()
    assert len(records) == 10
    summary = [x for x in (tmp_path / "polled" / "run" / "train.log").read_text().splitlines()
               if "checkpoint watcher stopped" in x]
    assert len(summary) == 1 and "files complete by: log 20" in summary[0], summary
