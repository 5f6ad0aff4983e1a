"""The sidecar as a library call (`TailRun(config, path, pid=...).tail()`), stopped by a rule:
a line hook that asks the run to stop signals the followed process (as `run` signals its child);
the follow ends once that process has exited, after reading the whole log. And `--until-exit-of`
ends with the last process of a name."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.conftest import real_logs
from trainvisor import RunConfig
from trainvisor.config import LoggingConfig, ParsingConfig, RunDirConfig
from trainvisor.run.sidecar import ProcessEnd, TailRun
from trainvisor.run.summary import EXIT_STOPPED, RunSummary
from trainvisor.stream.source import End
from trainvisor.stream.tail import TailFollower

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
# A stand-in training that ends on SIGINT as Python frameworks do (exit 130), else reads on. Its
# handler is its own and it says when it is in place: a SIGINT before that would find Python's
# inherited disposition (ignored, when the test session was started in a shell's background).
WAITER = ("import signal, sys\nsignal.signal(signal.SIGINT, lambda *_: sys.exit(130))\n"
          "print('ready', flush=True)\nsys.stdin.read()\n")


def tail_once(config: RunConfig, log) -> RunSummary:
    """One sidecar on `log` whose process has already exited: it reads to the end and stops."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        os.waitid(os.P_PID, ended.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: its pid stays
        return TailRun(config, log, pid=ended.pid).tail()
    finally:
        ended.wait()


def start_waiter(argv0: str = sys.executable) -> subprocess.Popen:
    """The stand-in training, once its SIGINT handler is in place."""
    proc = subprocess.Popen([argv0, "-c", WAITER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdout.readline() == b"ready\n"
    return proc


def test_a_stop_rule_signals_the_followed_process_and_the_log_is_read_to_its_end(tmp_path):
    src = real_logs("caffe") / "bearpaw-fork-mnist.log"
    log = tmp_path / "train.log"
    log.write_bytes(src.read_bytes())
    replayed = tmp_path / "replay.jsonl"
    subprocess.run(TRAINVISOR + ["replay", str(src), "--parser", "caffe", "--year", "2026", "--metrics",
                                 str(replayed)], check=True, capture_output=True, timeout=120)
    training = start_waiter()
    config = RunConfig(parsing=ParsingConfig(parser="caffe", year=2026), logging=LoggingConfig(quiet=True),
                       run=RunDirConfig(dir=str(tmp_path / "run")))
    asked: list[int] = []

    def rule(record) -> None:  # a stop rule of the simplest kind: a line that says enough
        if "Iteration 5000, loss" in record.text and not asked:
            asked.append(record.number)
            run.request_stop("iteration 5000 reached")

    try:
        run = TailRun(config, log, pid=training.pid, hooks=[rule])
        summary = run.tail()
        assert training.wait(timeout=30) == 130  # it got the rule's SIGINT
    finally:
        if training.poll() is None:
            training.kill()
            training.wait()
        training.stdin.close()
        training.stdout.close()
    assert summary.stop_reason == "iteration 5000 reached" and summary.exit_code == EXIT_STOPPED
    assert (summary.followed.rotations, summary.followed.truncations) == (0, 0)
    from trainvisor.run.summaryfile import read_summary

    kept = read_summary(tmp_path / "run")  # summary.json is written once, with the follow's counts
    assert (kept.followed, kept.lines) == (summary.followed, summary.lines)
    got = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    want = [json.loads(line) for line in replayed.read_text().splitlines()]
    strip = lambda d: {k: v for k, v in d.items() if k not in ("wall_time", "attempt")}  # noqa: E731
    assert [strip(d) for d in got] == [strip(d) for d in want] and len(got) == 363
    assert asked == [src.read_bytes().split(b"\n").index(
        next(line for line in src.read_bytes().split(b"\n") if b"Iteration 5000, loss" in line)) + 1]


def test_until_exit_of_a_name_ends_with_the_last_process_of_that_name(tmp_path):
    name = f"tv-train-{os.getpid()}"  # a name no other process on the machine has
    os.symlink(sys.executable, tmp_path / name)
    log = tmp_path / "train.log"
    log.write_bytes(b"Iteration 1, loss = 0.5\n")
    training = start_waiter(str(tmp_path / name))
    ends = ProcessEnd(name=name)
    follower = TailFollower(log, should_end=ends.ended, idle=0.05)
    items = follower.items()
    try:
        assert next(items).data == b"Iteration 1, loss = 0.5\n"
        assert next(items) is None and not ends.ended()  # quiet: the training still runs
        training.send_signal(signal.SIGINT)
        training.wait(timeout=30)
        rest = [item for item in items if item is not None]
        assert type(rest[-1]) is End
    finally:
        items.close()
        if training.poll() is None:
            training.kill()
            training.wait()
        training.stdin.close()
        training.stdout.close()


def test_bad_end_options_are_one_line_errors(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no longer runs (reaped)
    env = {**os.environ, "LANG": "C.UTF-8"}
    bad = subprocess.run(TRAINVISOR + ["tail", str(tmp_path / "train.log"), "--run-dir", str(tmp_path / "run"),
                                       "--pid", str(gone.pid)], capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines() == [f"trainvisor: --pid {gone.pid}: no such process"]
    both = subprocess.run(TRAINVISOR + ["tail", str(tmp_path / "train.log"), "--pid", "1", "--until-exit-of", "x"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert both.returncode == 2 and "--pid and --until-exit-of: give one" in both.stderr
    assert "Traceback" not in bad.stderr + both.stderr


def test_a_sidecar_that_ended_on_a_partial_line_and_is_started_again_reports_it_once_whole(tmp_path):
    """The first follow ends (its process has exited) on half a metric line and reports what it
    holds; the log then goes on (the training restarted into it) and a second follow on the same
    run directory reads on: the half line's record is replaced by the whole line's, as replay of
    the whole log gives it."""
    src = real_logs("caffe") / "bearpaw-fork-mnist.log"
    data = src.read_bytes()
    at = data.index(b"Test net output #0: accuracy = ", 30_000)
    cut = at + len(b"Test net output #0: accuracy = ") + 3  # inside the value
    log = tmp_path / "train.log"
    log.write_bytes(data[:cut])
    replayed = tmp_path / "replay.jsonl"
    subprocess.run(TRAINVISOR + ["replay", str(src), "--parser", "caffe", "--year", "2026", "--metrics",
                                 str(replayed)], check=True, capture_output=True, timeout=120)
    config = RunConfig(parsing=ParsingConfig(parser="caffe", year=2026), logging=LoggingConfig(quiet=True),
                       run=RunDirConfig(dir=str(tmp_path / "run")))
    metrics = tmp_path / "run" / "metrics.jsonl"
    for part in (None, data[cut:]):
        if part is not None:
            with open(log, "ab") as fh:
                fh.write(part)
        tail_once(config, log)
        if part is None:
            half = [json.loads(line) for line in metrics.read_text().splitlines()][-1]
            assert (half["name"], half["line"]) == ("accuracy", data[:cut].count(b"\n") + 1)
    strip = lambda d: {k: v for k, v in d.items() if k not in ("wall_time", "attempt")}  # noqa: E731
    got = [strip(json.loads(line)) for line in metrics.read_text().splitlines()]
    assert got == [strip(json.loads(line)) for line in replayed.read_text().splitlines()]

