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


class Writer:
    """A training's log: `data` in ten pieces cut inside lines, appended (O_APPEND, so after a
    copytruncate it goes on at 0), rotated as logrotate does (train.log.1, .2, ...)."""

    def __init__(self, log: Path, data: bytes) -> None:
        self.log, self.dir = log, log.parent
        step = len(data) // 10
        self.cuts = [0, *(i * step + 11 for i in range(1, 10)), len(data)]
        self.piece = [data[a:b] for a, b in zip(self.cuts, self.cuts[1:])]
        self.fh = open(log, "ab")

    def write(self, i: int) -> None:
        self.fh.write(self.piece[i])
        self.fh.flush()

    def _shift(self) -> None:
        for n in (2, 1):
            older = self.dir / f"{self.log.name}.{n}"
            if older.exists():
                os.rename(older, self.dir / f"{self.log.name}.{n + 1}")

    def rename_rotate(self) -> None:
        self._shift()
        os.rename(self.log, self.dir / f"{self.log.name}.1")
        self.fh.close()
        self.fh = open(self.log, "ab")

    def copytruncate(self) -> None:
        self._shift()
        shutil.copyfile(self.log, self.dir / f"{self.log.name}.1")
        os.truncate(self.log, 0)

    def close(self) -> None:
        self.fh.close()


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


class Scene:
    """A real Caffe log, what `trainvisor replay` makes of it, a log path and a run directory
    (both empty), a stand-in training (it ends when its stdin closes) and `sidecar()`, which
    starts `trainvisor tail` on them with `--pid` of that training."""

    def __init__(self, tmp_path: Path, processes: list, log_name: str) -> None:
        src = real_logs("caffe") / log_name
        self.data = src.read_bytes()
        expected_file = tmp_path / "replay.jsonl"
        subprocess.run(TRAINVISOR + ["replay", str(src), "--parser", "caffe", "--metrics", str(expected_file)],
                       check=True, timeout=120, capture_output=True)
        self.expected = records(expected_file)
        work, self.run_dir = tmp_path / "logs", tmp_path / "run"
        work.mkdir()
        self.run_dir.mkdir()
        self.log, self.metrics = work / "train.log", self.run_dir / "metrics.jsonl"
        self.processes = processes
        self.training = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                         stdin=subprocess.PIPE)
        processes.append(self.training)

    def sidecar(self, *flags: str) -> subprocess.Popen:
        env = {**os.environ, "TZ": "UTC", "LANG": "C.UTF-8", "COLUMNS": "80"}
        p = subprocess.Popen(TRAINVISOR + ["tail", str(self.log), "--run-dir", str(self.run_dir), "--parser", "caffe",
                                           "--pid", str(self.training.pid), *flags],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.processes.append(p)
        return p

    def end_training(self, last: subprocess.Popen) -> str:
        """The training ends; `last` (the sidecar now running) reads what is left and ends: its stderr."""
        self.training.stdin.close()
        self.training.wait(timeout=30)
        _, err = last.communicate(timeout=60)
        assert last.returncode == 0, err.decode()
        return err.decode()


def test_rotations_copytruncate_and_a_sigkill_report_every_metric_once(tmp_path, processes):
    sc = Scene(tmp_path, processes, "bearpaw-fork-mnist.log")
    data, run_dir, metrics = sc.data, sc.run_dir, sc.metrics
    assert len(sc.expected) == 363
    w = Writer(sc.log, data)
    try:
        first = sc.sidecar("--summary")  # the log does not exist yet
        w.write(0)
        w.write(1)
        # the log's first 40% sets the nets up (no metric): the position record shows the progress
        wait_for(run_dir, lambda: lines_read(run_dir) == data[:w.cuts[2]].count(b"\n"), "the first lines read")
        w.write(2)
        w.rename_rotate()  # 1: the old file written to just before, the new one starts mid-line
        w.write(3)
        w.write(4)
        wait_for(run_dir, lambda: complete_records(metrics) > 0, "the sidecar at work after a rotation")
        # its position past the first metric's line: what attempt 1 wrote up to it is kept (records
        # past the position are the restarted sidecar's to write again: all of them, in a flake)
        wait_for(run_dir, lambda: lines_read(run_dir) >= sc.expected[0]["line"], "attempt 1's records kept")
        first.send_signal(signal.SIGKILL)  # in the middle of its work
        first.wait(timeout=30)
        w.write(5)
        w.copytruncate()  # while no sidecar runs: what it had not read is in the copy
        w.write(6)
        read_before = lines_read(run_dir)  # where the killed sidecar's last record stands
        second = sc.sidecar("--summary")
        w.write(7)
        wait_for(run_dir, lambda: complete_records(metrics) >= 201, "the restarted sidecar's records")
        w.rename_rotate()  # 2
        w.write(8)
        w.write(9)
    finally:
        w.close()
    err = sc.end_training(second)
    assert records(metrics) == sc.expected  # each metric once, in order, its line number that of the whole log
    attempts = [json.loads(line)["attempt"] for line in metrics.read_text().splitlines()]
    assert set(attempts) == {1, 2}
    assert "followed       2 rotation(s), 1 truncation(s) (inotify)" in err
    total = data.count(b"\n")
    assert f"lines parsed   {total - read_before}\n" in err  # the re-read ones not counted twice


def test_killed_again_and_again_every_metric_still_once(tmp_path, processes):
    """Five SIGKILLs at whatever moment the sidecar is at (reading, writing records, re-reading
    after its restart), a rename rotation among them: still the replay's records, once each."""
    sc = Scene(tmp_path, processes, "digits-robond-lenet.log")
    run_dir = sc.run_dir
    w = Writer(sc.log, sc.data)
    try:
        for i in range(5):
            p = sc.sidecar("-q")
            w.write(2 * i)
            if i == 2:
                w.rename_rotate()
            w.write(2 * i + 1)
            seen = lines_read(run_dir)
            wait_for(run_dir, lambda: lines_read(run_dir) > seen, "the sidecar's progress")
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=30)
    finally:
        w.close()
    last = sc.sidecar("-q")
    wait_for(run_dir, lambda: b"attempt 6: following" in (run_dir / "train.log").read_bytes(),
             "the last sidecar to follow (it needs the training's pid alive to start)")
    sc.end_training(last)
    assert records(sc.metrics) == sc.expected
