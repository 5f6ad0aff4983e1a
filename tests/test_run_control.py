"""The Run is the training's control handle and outlives one child: `request_stop` from another
thread ends a fake Caffe politely (SIGINT: it snapshots, and that snapshot is uploaded), firmly
when it ignores SIGINT (SIGTERM after the grace); a second child attempt writes into the same
sinks with its own attempt number and a fresh parser."""
from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

from trainvisor import Run, RunConfig
from trainvisor.config import LoggingConfig, ParsingConfig, ProcessConfig, RunDirConfig, UploadConfig, WatchConfig
from trainvisor.run.summary import EXIT_STOPPED

from .conftest import FAKE_CAFFE, FIXTURES

LOG = FIXTURES / "logs" / "lenet-newyear.log"


def _config(work: Path, *extra: str, upload: bool = False, grace: float = 30.0) -> RunConfig:
    command = (sys.executable, str(FAKE_CAFFE), str(LOG), "--snapshot-dir", str(work / "snap"), "--rate", "400",
               "--sleep-at-end", "60", *extra)
    return RunConfig(command=command, process=ProcessConfig(cwd=str(work), stop_grace=grace, kill_timeout=10),
                     parsing=ParsingConfig(year=2026, parser="caffe"),
                     watch=WatchConfig(dirs=(str(work / "snap"),)),
                     upload=UploadConfig(to=f"file://{work / 'store'}" if upload else None),
                     logging=LoggingConfig(quiet=True), run=RunDirConfig(id="r1", dir=str(work / "run")))


def _records(work: Path) -> list[dict]:
    return [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]


def _run_stopped_at(config: RunConfig, iteration: int, reason: str) -> tuple[Run, threading.Event]:
    """A Run with a line hook (the pipeline thread: not the thread that waits for the child) that
    asks it to stop when the log reaches `iteration`."""
    asked = threading.Event()

    def hook(record) -> None:
        if not asked.is_set() and f"Iteration {iteration}," in record.text:
            asked.set()
            assert run.request_stop(reason)
            assert not run.request_stop("a second reason")  # the first one stands
    run = Run(config, hooks=[hook], stdout_fd=None, stderr_fd=None)
    return run, asked


def test_request_stop_sends_sigint_and_the_snapshot_caffe_writes_on_it_is_uploaded(tmp_path):
    config = _config(tmp_path, "--on-sigint", "snapshot", upload=True)
    run, asked = _run_stopped_at(config, 300, "loss is low enough")
    summary = run.run()
    assert asked.is_set()
    assert (summary.exit_code, summary.returncode, summary.stop_reason) == (EXIT_STOPPED, 0, "loss is low enough")
    assert summary.signalled_by is None  # SIGINT did it: no SIGTERM was needed
    stopped_at = max(r["iteration"] for r in _records(tmp_path) if r.get("name") == "total_loss")
    assert 300 <= stopped_at < 1000  # the log goes to 1000: the child stopped where it was asked
    snapshot = f"lenet_iter_{stopped_at}.caffemodel"
    stored = {p.name: p.read_bytes() for p in (tmp_path / "store").rglob("lenet_iter_*") if "manifest" not in p.name}
    local = {p.name: p.read_bytes() for p in (tmp_path / "snap").rglob("lenet_iter_*")}
    assert snapshot in stored and stored == local  # the snapshot written on SIGINT is in the store
    assert summary.uploads is not None and summary.uploads.complete
    log = (tmp_path / "run" / "train.log").read_text()
    assert "stopping the training (loss is low enough): SIGINT to its process group" in log
    assert "the training was stopped on request (loss is low enough)" in log


def test_a_child_that_ignores_sigint_gets_sigterm_after_the_grace(tmp_path):
    config = _config(tmp_path, "--on-sigint", "ignore", grace=0.5)
    run, _ = _run_stopped_at(config, 200, "no improvement")
    summary = run.run()
    assert (summary.exit_code, summary.returncode) == (EXIT_STOPPED, -signal.SIGTERM)
    assert (summary.signalled_by, summary.stop_reason) == (signal.SIGTERM, "no improvement")
    log = (tmp_path / "run" / "train.log").read_text()
    assert "the training did not stop 0.5s after SIGINT: SIGTERM" in log


def test_a_stop_asked_before_the_child_starts_stops_it_as_soon_as_it_runs(tmp_path):
    with Run(_config(tmp_path, "--on-sigint", "snapshot"), stdout_fd=None, stderr_fd=None) as run:
        assert run.request_stop("the platform is draining this node")
        run.run_attempt()
        summary = run.finish()
    assert (summary.exit_code, summary.stop_reason) == (EXIT_STOPPED, "the platform is draining this node")
    assert summary.lines < LOG.read_bytes().count(b"\n")


class _CountingSink:
    name = "counting"

    def __init__(self) -> None:
        self.opened, self.closed, self.metrics = 1, 0, []

    def write(self, events) -> None:
        self.metrics += [e for e in events if hasattr(e, "value")]

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed += 1


def test_two_child_attempts_write_one_metrics_file_through_sinks_opened_once(tmp_path):
    """A restart into the same run: the records of each attempt carry its number, the second is
    read by a fresh parser (it numbers its lines from 1 and finds every metric again), and the
    sinks are the same objects, closed once at the end."""
    command = (sys.executable, str(FAKE_CAFFE), str(LOG), "--no-snapshots")
    config = RunConfig(command=command, parsing=ParsingConfig(year=2026, parser="caffe"),
                       logging=LoggingConfig(quiet=True), run=RunDirConfig(id="r1", dir=str(tmp_path / "run")))
    sink = _CountingSink()
    parsers = []

    def fresh_parser():
        from trainvisor.parsers import ParserOptions, create_parser
        parsers.append(create_parser("caffe", ParserOptions(year=2026)))
        return parsers[-1]

    with Run(config, parser=fresh_parser, sinks=[sink], stdout_fd=None, stderr_fd=None) as run:
        first = run.run_attempt()
        assert sink.closed == 0  # the sinks outlive the child
        second = run.run_attempt()
        summary = run.finish()
    assert (first.exit_code, second.exit_code, summary.attempts, summary.attempt) == (0, 0, 2, 2)
    assert len(parsers) == 2 and parsers[0] is not parsers[1]
    records = [r for r in _records(tmp_path) if "name" in r]
    by_attempt = {n: [r for r in records if r["attempt"] == n] for n in (1, 2)}
    assert len(by_attempt[1]) == len(by_attempt[2]) == 91 and len(records) == 182
    strip = [{k: v for k, v in r.items() if k not in ("attempt", "wall_time")} for r in records]
    assert strip[:91] == strip[91:]  # the same lines, the same metrics: nothing carried over
    assert (sink.opened, sink.closed, len(sink.metrics)) == (1, 1, 182)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["attempt"] == 2
