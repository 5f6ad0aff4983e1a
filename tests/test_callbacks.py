"""Callbacks: checked when registered (pluggy's rule), every one called for every event, one that
raises counted and never stopping the training, stop votes collected (MXNet's lesson) and acted
on once; loaded by `module:Class` from the config or `--callback`; their own thread, whose full
queue drops batch_end events only."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import trainvisor
from trainvisor import Callback, Run, RunConfig
from trainvisor.config import LoggingConfig, ParsingConfig, ProcessConfig, RunDirConfig, UploadConfig, WatchConfig
from trainvisor.errors import ConfigError
from trainvisor.run.summary import EXIT_STOPPED
from trainvisor.timeline import TrainBegin, register_callback, timeline_of
from trainvisor.timeline.callbacks import load_callback
from trainvisor.timeline.dispatch import Dispatcher
from trainvisor.timeline.runner import CallbackThread

from .conftest import FAKE_CAFFE, FIXTURES, ROOT, real_logs
from .test_import_map import _offenders

LOG = FIXTURES / "logs" / "lenet-newyear.log"
TESTS_OF_LOG = [int(n) for n in re.findall(r"Iteration (\d+), Testing net", LOG.read_text())]


class Recorder(Callback):
    """Every event it is given, in order; votes to stop at `stop_at`'s first test_end, if given."""

    def __init__(self, name: str, stop_at: int | None = None) -> None:
        self.name, self.stop_at, self.seen = name, stop_at, []

    def on_train_begin(self, event):
        self.seen.append(event)

    def on_batch_end(self, event):
        self.seen.append(event)

    def on_test_end(self, event, iteration):
        self.seen.append(event)
        if self.stop_at is not None and iteration >= self.stop_at:
            return f"test at iteration {iteration} is good enough"

    def on_epoch_end(self, event):
        self.seen.append(event)

    def on_checkpoint(self, event):
        self.seen.append(event)

    def on_train_end(self, event):
        self.seen.append(event)


class Raiser(Callback):
    def on_test_end(self, values):
        raise ZeroDivisionError(f"a bug of the user's ({len(values)} values)")


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


# ---- registration ----

def test_a_misspelled_hook_is_an_error_naming_the_callback_and_the_nearest_hook():
    from .timeline_callbacks import Misspelled

    with pytest.raises(ConfigError) as exc:
        register_callback(Misspelled())
    assert _one_line(exc) == "callback Misspelled: unknown hook on_epoch_ends; did you mean on_epoch_end?"


def test_an_argument_the_event_does_not_give_is_an_error_naming_it():
    class Early(Callback):
        name = "early-stop"

        def on_epoch_end(self, epoch, val_loss):
            pass

    with pytest.raises(ConfigError) as exc:
        register_callback(Early())
    text = _one_line(exc)
    assert text.startswith("callback early-stop: on_epoch_end asks for 'val_loss', which the epoch_end event does "
                           "not give (it gives epoch, event, iteration, line, rank, stream, values, wall_time)")


def test_a_positional_only_parameter_is_refused_and_a_hookless_object_too():
    class Positional:
        def on_train_end(self, exit_code, /):
            pass

    with pytest.raises(ConfigError, match=r"callback Positional: on_train_end\(exit_code\) is positional-only"):
        register_callback(Positional())
    with pytest.raises(ConfigError, match="callback object: no hook"):  # (its class's name)
        register_callback(object())


def test_a_bad_callback_passed_to_run_fails_before_anything_starts(tmp_path):
    from .timeline_callbacks import Misspelled

    config = RunConfig(command=("true",), run=RunDirConfig(dir=str(tmp_path / "run")))
    with pytest.raises(ConfigError, match="on_epoch_ends"):
        Run(config, callbacks=[Misspelled()])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("spec,options,message", [
    ("tests.timeline_callbacks", {}, "callbacks.use: 'tests.timeline_callbacks' is not module:Class"),
    ("tests.no_such_module:X", {}, "callbacks.use: cannot import tests.no_such_module for tests.no_such_module:X: "
                                   "ModuleNotFoundError: No module named 'tests.no_such_module'"),
    ("tests.timeline_callbacks:Nope", {}, "callbacks.use: tests.timeline_callbacks has no Nope"),
    ("tests.timeline_callbacks:EventLog", {"pth": "x"},
     "callbacks.use: tests.timeline_callbacks:EventLog(pth='x') failed: TypeError: "),
    ("tests.timeline_callbacks:Misspelled", {}, "callback tests.timeline_callbacks:Misspelled: unknown hook"),
])
def test_a_bad_spec_is_a_one_line_error_naming_it(spec, options, message):
    with pytest.raises(ConfigError) as exc:
        load_callback(spec, options)
    assert _one_line(exc).startswith(message)


def test_the_timeline_imports_no_parser_run_or_process_code():
    assert _offenders("trainvisor.timeline", ("trainvisor.parsers", "trainvisor.run", "trainvisor.supervisor",
                                              "trainvisor.cli", "trainvisor.sinks")) == []


# ---- dispatch over a real log's timeline ----

def test_every_callback_sees_every_event_and_one_stop_request_follows_all_votes():
    events = timeline_of(trainvisor.replay(real_logs("keras") / "esartic-sound-cnn-30ep.log").events)
    epochs = [e for e in events if e.kind == "epoch_end"]
    first, voter, last = Recorder("first"), Recorder("voter"), Recorder("last")
    voter.on_epoch_end = lambda event, epoch: voter.seen.append(event) or (epoch >= 3)  # votes True from epoch 3
    asked = []
    d = Dispatcher([register_callback(c) for c in (first, Raiser(), voter, last)], request_stop=asked.append)
    for ev in events:
        d.dispatch(ev)
    assert first.seen == voter.seen == last.seen == events  # the vote skipped no one, before or after
    assert asked == ["voter: stop voted on epoch_end"]  # once, though it voted on every later epoch
    assert d.votes == ["voter: stop voted on epoch_end"] * sum(e.epoch >= 3 for e in epochs)  # 10 fits of 30
    assert d.fault_counts == {"callback Raiser.on_test_end": len(epochs)}  # Keras: one validation per epoch


def test_a_hook_is_given_only_the_arguments_it_asks_for():
    got = []

    class Few:
        def on_test_end(self, iteration, values):
            got.append((iteration, dict(values)))

    events = timeline_of(trainvisor.replay(LOG, year=2026).events)
    d = Dispatcher([register_callback(Few())])
    for ev in events:
        d.dispatch(ev)
    assert [i for i, _ in got] == TESTS_OF_LOG
    first = re.findall(r"Test net output #\d+: (\w+) = ([\d.]+)", LOG.read_text())[:2]
    assert got[0][1] == {name: float(v) for name, v in first}


# ---- the callbacks' thread ----

def test_a_full_queue_drops_batch_end_events_only_and_counts_them():
    events = timeline_of(trainvisor.replay(LOG, year=2026).events)
    batches = [e for e in events if e.kind == "batch_end"][:5]
    tests = [e for e in events if e.kind == "test_end"][:1]
    entered, release = threading.Event(), threading.Event()
    seen = []

    class Slow:
        def on_train_begin(self):
            entered.set()
            release.wait()

        def on_batch_end(self, event):
            seen.append(event)

        def on_test_end(self, event):
            seen.append(event)

    thread = CallbackThread(Dispatcher([register_callback(Slow())]), capacity=2)
    thread.put([TrainBegin("r", ("x",), 0.0)])
    assert entered.wait(10)
    thread.put(batches + tests)  # the callback is busy: 2 batch_end fit, 3 do not; the test_end always does
    release.set()
    counts = thread.close(10)
    assert seen == batches[:2] + tests
    assert (counts.dispatched, counts.dropped, counts.abandoned) == (4, 3, 0)


def test_a_callback_still_busy_at_the_end_is_abandoned_not_waited_for():
    entered, release = threading.Event(), threading.Event()

    class Stuck:
        def on_train_begin(self):
            entered.set()
            release.wait()

    thread = CallbackThread(Dispatcher([register_callback(Stuck())]), capacity=10)
    thread.put([TrainBegin("r", ("x",), 0.0), TrainBegin("r", ("x",), 1.0)])
    assert entered.wait(10)
    counts = thread.close(0.0)
    release.set()  # the test's own thread ends
    assert counts.abandoned == 2  # the one in the callback and the one queued


# ---- a run ----

def _config(work: Path, *extra: str, upload: bool = False) -> RunConfig:
    command = (sys.executable, str(FAKE_CAFFE), str(LOG), "--snapshot-dir", str(work / "snap"), *extra)
    return RunConfig(command=command, process=ProcessConfig(cwd=str(work), stop_grace=30, kill_timeout=10),
                     parsing=ParsingConfig(year=2026, parser="caffe"), watch=WatchConfig(dirs=(str(work / "snap"),)),
                     upload=UploadConfig(to=f"file://{work / 'store'}" if upload else None),
                     logging=LoggingConfig(quiet=True), run=RunDirConfig(id="r1", dir=str(work / "run")))


def test_a_raising_callback_is_counted_and_the_run_ends_with_the_childs_exit_code(tmp_path):
    recorder = Recorder("recorder")
    summary = Run(_config(tmp_path, "--exit-code", "3"), callbacks=[Raiser(), recorder],
                  stdout_fd=None, stderr_fd=None).run()
    assert summary.exit_code == 3 and summary.lines == LOG.read_bytes().count(b"\n")
    assert [f for f in summary.faults if f.component.startswith("callback")] == [
        type(summary.faults[0])("callback Raiser.on_test_end", len(TESTS_OF_LOG))]
    assert [e.iteration for e in recorder.seen if e.kind == "test_end"] == TESTS_OF_LOG
    assert (recorder.seen[0].kind, recorder.seen[-1].kind) == ("train_begin", "train_end")
    end = recorder.seen[-1]
    assert (end.exit_code, end.reason, end.stopped) == (3, "exit code 3", False)
    log = (tmp_path / "run" / "train.log").read_text()
    assert "callback Raiser.on_test_end failed: ZeroDivisionError: a bug of the user's (2 values)" in log


def test_two_callbacks_both_see_every_event_when_one_votes_to_stop(tmp_path):
    voter, other = Recorder("voter", stop_at=300), Recorder("other")
    config = _config(tmp_path, "--rate", "400", "--on-sigint", "snapshot", "--sleep-at-end", "60", upload=True)
    summary = Run(config, callbacks=[voter, other], stdout_fd=None, stderr_fd=None).run()
    reason = "voter: test at iteration 500 is good enough"  # the first test at or after 300
    assert (summary.exit_code, summary.stop_reason) == (EXIT_STOPPED, reason)
    assert voter.seen == other.seen
    kinds = [e.kind for e in other.seen]
    assert kinds[0] == "train_begin" and kinds[-1] == "train_end" and kinds.count("train_end") == 1
    assert other.seen[-1].stopped and other.seen[-1].reason == reason
    tests = [e.iteration for e in other.seen if e.kind == "test_end"]
    assert tests == [t for t in TESTS_OF_LOG if t <= tests[-1]] and tests[-1] < TESTS_OF_LOG[-1]
    # the snapshot Caffe writes on SIGINT: complete, then verified in the store
    stopped_at = max(e.iteration for e in other.seen if e.kind == "batch_end")
    states = [(e.state, e.ok) for e in other.seen if e.kind == "checkpoint" and e.iteration == stopped_at]
    assert ("complete", True) in states and ("verified", True) in states


def _env_with_tests() -> dict:
    """The checkout on the child's path, so `tests.timeline_callbacks` imports from any cwd (the
    package itself is installed; the tests folder is not)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def test_the_callback_flag_and_its_options_from_the_config_file(tmp_path):
    out = tmp_path / "events.jsonl"
    spec = "tests.timeline_callbacks:EventLog"
    (tmp_path / "tv.json").write_text(json.dumps({"callbacks": {"options": {spec: {"path": str(out)}}}}))
    proc = subprocess.run([sys.executable, "-m", "trainvisor", "run", "-q", "--config", "tv.json", "--callback", spec,
                           "--run-dir", "r", "--parser", "caffe", "--year", "2026", "--",
                           sys.executable, str(FAKE_CAFFE), str(LOG), "--no-snapshots"],
                          cwd=tmp_path, capture_output=True, timeout=120, stdin=subprocess.DEVNULL, env=_env_with_tests())
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["iteration"] for r in records if r["kind"] == "test_end"] == TESTS_OF_LOG
    assert records[-1] == {"kind": "train_end", "exit_code": 0, "reason": "exit code 0", "stopped": False}


def test_a_bad_callback_flag_is_one_line_and_starts_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "trainvisor", "run", "--run-dir", "r", "--callback",
                           "tests.timeline_callbacks:Misspelled", "--", "true"],
                          cwd=tmp_path, capture_output=True, timeout=60, stdin=subprocess.DEVNULL, env=_env_with_tests())
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "Traceback" not in err
    assert "unknown hook on_epoch_ends; did you mean on_epoch_end?" in err.strip().splitlines()[-1]


def test_a_command_that_cannot_start_still_ends_the_callbacks_timeline(tmp_path):
    recorder = Recorder("recorder")
    config = RunConfig(command=(str(tmp_path / "no-such-trainer"),), logging=LoggingConfig(quiet=True),
                       run=RunDirConfig(dir=str(tmp_path / "run")))
    with pytest.raises(trainvisor.TrainvisorError):
        Run(config, callbacks=[recorder], stdout_fd=None, stderr_fd=None).run()
    assert [e.kind for e in recorder.seen] == ["train_begin", "train_end"]
    assert (recorder.seen[-1].exit_code, recorder.seen[-1].stopped) == (None, False)
