"""A run log that cannot be written (its disk is full) costs one line on stderr, never a flood into
the training's output; the training's bytes pass through untouched and the exit code is its own."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
CHILD = """
import logging, sys
import trainvisor.logging as tl
tl.attach()  # the training logs into the run log too, which fills the small disk
log = logging.getLogger("train")
for i in range(3000):
    log.warning("step %d %s", i, "x" * 80)
    print(f"step {i} loss: {1 / (i + 1):.6f}", flush=True)
    print(f"stderr line {i}", file=sys.stderr, flush=True)
sys.exit(3)
"""
EXPECTED_OUT = "".join(f"step {i} loss: {1 / (i + 1):.6f}\n" for i in range(3000))
EXPECTED_ERR = "".join(f"stderr line {i}\n" for i in range(3000))


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "small"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.parametrize("quiet", [False, True])
def test_a_full_run_log_is_one_line_and_the_training_goes_on(tmp_path, small_disk, quiet):
    (tmp_path / "train.py").write_text(CHILD)
    proc = subprocess.run(TRAINVISOR + ["run", *(["-q"] if quiet else []), "--run-dir", str(small_disk / "r"),
                                        "--metrics", str(tmp_path / "m.jsonl"), "--parser", "generic", "--",
                                        sys.executable, "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3
    assert proc.stdout == EXPECTED_OUT
    own = [line for line in proc.stderr.splitlines(keepends=True) if not line.startswith("stderr line ")]
    assert "".join(line for line in proc.stderr.splitlines(keepends=True) if line.startswith("stderr line ")) \
        == EXPECTED_ERR
    if quiet:
        assert own == []
    else:
        # the run log's failure once; and the run's summary.json: kept (a failed write of the log
        # is cut back, so what room there is may take it), or said once at the end that it could
        # not be (the printed summary and the exit code are whole either way)
        summary = small_disk / "r" / "summary.json"
        assert own[0] == (f"trainvisor.logging: cannot write {small_disk / 'r' / 'train.log'} "
                          "(No space left on device); going on without it\n")
        if own[1:]:
            assert own[1:] == [f"trainvisor: could not keep the run's summary in {small_disk / 'r'}: "
                               "No space left on device\n"]
        else:
            assert json.loads(summary.read_text())["exit_code"] == 3
    assert (tmp_path / "m.jsonl").read_text().count("\n") == 3000  # the metrics were kept elsewhere
