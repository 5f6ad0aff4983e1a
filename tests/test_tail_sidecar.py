"""`trainvisor tail` as a sidecar process: a real Caffe log written in pieces that cut lines,
rotated twice by rename and once by copytruncate, the sidecar SIGKILLed in the middle and started
again on the same run directory; it ends when the (stand-in) training process exits. Every
metric of the whole log is in metrics.jsonl exactly once, as `trainvisor replay` of the log gives
it, line numbers included. Waits are on what the sidecar wrote (inotify on the run directory),
bounded."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import real_logs
from trainvisor.stream.tailpos import PositionStore
from trainvisor.stream.tailwait import InotifyWaiter

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
VOLATILE = ("wall_time", "attempt")  # when the line was read, and by which start of the sidecar


def records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        d = json.loads(line)
        for k in VOLATILE:
            d.pop(k, None)
        out.append(d)
    return out


def complete_records(path: Path) -> int:
    """Records whose line was written whole (a killed sidecar may leave half of one)."""
    return path.read_bytes().count(b"\n") if path.exists() else 0


def lines_read(run_dir: Path) -> int:
    if not (run_dir / "tail-position.json").exists():
        return -1
    store = PositionStore(run_dir)
    try:
        position = store.load()
    finally:
        store.close()
    return position.lines if position else -1


def wait_for(run_dir: Path, done, what: str, timeout: float = 60.0) -> None:
    """Until `done()`, woken by each change in the run directory; bounded."""
    waiter = InotifyWaiter(str(run_dir))
    try:
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            waiter.wait(min(left, 0.5))
    finally:
        waiter.close()


def shift(directory: Path, name: str) -> None:
    """logrotate's numbering: name.2 -> name.3, name.1 -> name.2."""
    for n in (2, 1):
        older = directory / f"{name}.{n}"
        if older.exists():
            os.rename(older, directory / f"{name}.{n + 1}")


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)
        for stream in (p.stdin, p.stdout, p.stderr):
            if stream is not None:
                stream.close()


def test_rotations_copytruncate_and_a_sigkill_report_every_metric_once(tmp_path, processes):
    data = (real_logs("caffe") / "bearpaw-fork-mnist.log").read_bytes()
    expected_file = tmp_path / "replay.jsonl"
    subprocess.run(TRAINVISOR + ["replay", str(real_logs("caffe") / "bearpaw-fork-mnist.log"), "--parser", "caffe",
                                 "--metrics", str(expected_file)], check=True, timeout=120, capture_output=True)
    expected = records(expected_file)
    assert len(expected) == 363
    work, run_dir = tmp_path / "logs", tmp_path / "run"
    work.mkdir()
    run_dir.mkdir()
    log, metrics = work / "train.log", run_dir / "metrics.jsonl"
    training = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    processes.append(training)
    env = {**os.environ, "TZ": "UTC", "LANG": "C.UTF-8", "COLUMNS": "80"}

    def sidecar() -> subprocess.Popen:
        p = subprocess.Popen(TRAINVISOR + ["tail", str(log), "--run-dir", str(run_dir), "--parser", "caffe",
                                           "--pid", str(training.pid), "--summary"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        processes.append(p)
        return p

    step = len(data) // 10
    cuts = [0, *(i * step + 11 for i in range(1, 10)), len(data)]  # inside lines
    piece = [data[a:b] for a, b in zip(cuts, cuts[1:])]
    fh = open(log, "ab")

    def write(i: int) -> None:
        fh.write(piece[i])
        fh.flush()

    def rename_rotate() -> None:
        nonlocal fh
        shift(work, "train.log")
        os.rename(log, work / "train.log.1")
        fh.close()
        fh = open(log, "ab")

    try:
        first = sidecar()  # the log does not exist yet
        write(0)
        write(1)
        # the log's first 40% sets the nets up (no metric): the position record shows the progress
        wait_for(run_dir, lambda: lines_read(run_dir) == data[:cuts[2]].count(b"\n"), "the first lines read")
        write(2)
        rename_rotate()  # 1: the old file written to just before, the new one starts mid-line
        write(3)
        write(4)
        wait_for(run_dir, lambda: complete_records(metrics) > 0, "the sidecar at work after a rotation")
        first.send_signal(signal.SIGKILL)  # in the middle of its work
        first.wait(timeout=30)
        write(5)
        shift(work, "train.log")  # copytruncate while no sidecar runs: what it had not read is in the copy
        shutil.copyfile(log, work / "train.log.1")
        os.truncate(log, 0)
        write(6)
        second = sidecar()
        write(7)
        wait_for(run_dir, lambda: complete_records(metrics) >= 201, "the restarted sidecar's records")
        rename_rotate()  # 2
        write(8)
        write(9)
    finally:
        fh.close()
    training.stdin.close()
    training.wait(timeout=30)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err.decode()
    got = records(metrics)
    assert got == expected  # each metric once, in order, its line number that of the whole log
    attempts = [json.loads(line)["attempt"] for line in metrics.read_text().splitlines()]
    assert set(attempts) == {1, 2}
    assert "followed       2 rotation(s), 1 truncation(s) (inotify)" in err.decode()
