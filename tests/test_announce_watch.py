"""What an announced checkpoint does to the watcher: the directory it is written in becomes
watched (a pure rule decides which), the sink proves files after or at once by kind, a Hugging
Face ``checkpoint-N`` folder is one set completed by its files, and a live watcher with no
directory of its own hands over what the log announced (and nothing an earlier run left)."""
from __future__ import annotations

import os
import threading
from typing import Optional

import pytest

from trainvisor.events import Checkpoint, CheckpointEvent, Metric
from trainvisor.watch import CheckpointTracker, CheckpointWatcher, default_recognizers
from trainvisor.watch.announce import AnnouncementSink
from trainvisor.watch.announced import directory_to_watch
from trainvisor.watch.fsevents import Announced, FileChanged, FileClosed, FileStat
from trainvisor.watch.recognizers import recognize

CWD, HOME = "/home/u/proj", "/home/u"


@pytest.mark.parametrize("path,directory,want", [
    ("ckpt/best.keras", False, "/home/u/proj/ckpt"),
    ("out/checkpoint-500", True, "/home/u/proj/out"),               # the Trainer's output dir: later ones too
    ("out", True, "/home/u/proj/out"),                               # the parent is the working directory
    ("/data/runs/x/model_0004999.pth", False, "/data/runs/x"),
    ("../sibling/w.h5", False, "/home/u/sibling"),
    ("best.keras", False, None),                                     # a file in the working directory
    ("../w.h5", False, None),                                        # in the home directory
    ("/model.pt", False, None),
    (".", True, None),
    ("gs://bucket/out/model.ckpt-100", False, None),                 # not a local path
])
def test_directory_to_watch(path, directory, want):
    assert directory_to_watch(path, directory=directory, cwd=CWD, home=HOME) == want


class Calls:
    """An announcer that records what the sink tells it, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def announce(self, path: str) -> None:
        self.calls.append(("proved", path))

    def watch_announced(self, path: str, *, directory: bool = False) -> None:
        self.calls.append(("watch", path, directory))


def _ck(path: str, kind: str, line: int) -> CheckpointEvent:
    return CheckpointEvent(path, kind, None, None, line, 0.0)


def _metric(line: int) -> Metric:
    return Metric("loss", 0.5, line, "train", None, None, None, 0.0, line)


@pytest.mark.parametrize("kind,directory", [("keras", False), ("pth", False), ("ckpt", False), ("trainer", True)])
def test_a_save_announced_before_the_write_is_proven_by_the_next_event(kind, directory):
    calls = Calls()
    sink = AnnouncementSink(calls)
    sink.write([_ck("d/x", kind, 1)])
    assert calls.calls == [("watch", "d/x", directory)]
    sink.write([_metric(2)])
    assert calls.calls[1:] == [("proved", "d/x")]


@pytest.mark.parametrize("kind", ["stripped", "params"])
def test_a_save_announced_after_the_write_is_proven_at_once(kind):
    calls = Calls()
    AnnouncementSink(calls).write([_ck("w/last.pt", kind, 1)])
    assert calls.calls == [("watch", "w/last.pt", False), ("proved", "w/last.pt")]


def test_the_last_before_announcement_of_a_log_proves_nothing():
    calls = Calls()
    sink = AnnouncementSink(calls)
    sink.write([_ck("ckpt/best.keras", "keras", 1)])
    sink.close()
    assert calls.calls == [("watch", "ckpt/best.keras", False)]


# -- Hugging Face Trainer folders ----------------------------------------------------------------

@pytest.mark.parametrize("path,want", [
    ("/r/out/checkpoint-500/model.safetensors", ("huggingface", "checkpoint-500", "model.safetensors", 500)),
    ("/r/out/checkpoint-500/optimizer.pt", ("huggingface", "checkpoint-500", "optimizer.pt", 500)),  # not pytorch's
    ("/r/out/checkpoint-500/trainer_state.json", ("huggingface", "checkpoint-500", "trainer_state.json", 500)),
    ("/r/out/checkpoint-500/optimizer.pt.tmp", None),
    ("/r/out/model_step_10.pt", ("pytorch", "model_step_10.pt", "file", 10)),
    ("/r/out/checkpoint-500/adapter/adapter_model.bin", None),   # deeper files are not the folder's
])
def test_trainer_folder_files_are_one_set(path, want):
    found = recognize(path, default_recognizers())
    got = None if found is None else (found[1].framework, found[1].set_name, found[1].role, found[1].iteration)
    assert got == want


class World:
    def __init__(self) -> None:
        self.now = 0.0
        self.files: dict[str, FileStat] = {}

    def stat(self, path: str) -> Optional[FileStat]:
        return self.files.get(path)


def test_trainer_folder_is_handed_over_when_its_state_file_and_every_file_are_complete():
    world = World()
    folder = "/r/out/checkpoint-500"
    names = ["config.json", "model.safetensors", "optimizer.pt", "trainer_state.json"]
    tracker = CheckpointTracker(["/r/out"], default_recognizers(), clock=lambda: world.now, stat=world.stat)
    for n in names:
        world.files[f"{folder}/{n}"] = FileStat(10, 1)
        assert tracker.feed(FileChanged(f"{folder}/{n}")) == []
    for n in names[:-1]:
        assert tracker.feed(FileClosed(f"{folder}/{n}")) == []   # no trainer_state.json yet
    (cp,) = tracker.feed(FileClosed(f"{folder}/trainer_state.json"))
    assert (cp.name, cp.iteration, cp.framework) == ("checkpoint-500", 500, "huggingface")
    assert sorted(f.relpath for f in cp.files) == [f"checkpoint-500/{n}" for n in sorted(names)]


def test_trainer_folder_waits_for_a_file_still_being_written():
    world = World()
    folder = "/r/out/checkpoint-7"
    tracker = CheckpointTracker(["/r/out"], default_recognizers(), clock=lambda: world.now, stat=world.stat)
    for n in ("model.safetensors", "trainer_state.json"):
        world.files[f"{folder}/{n}"] = FileStat(10, 1)
        tracker.feed(FileChanged(f"{folder}/{n}"))
    assert tracker.feed(FileClosed(f"{folder}/trainer_state.json")) == []   # the weights are still open
    assert [c.name for c in tracker.feed(Announced(f"{folder}/model.safetensors"))] == ["checkpoint-7"]


# -- a live watcher with no directory of its own ------------------------------------------------

class Recorder:
    def __init__(self) -> None:
        self.got: list[Checkpoint] = []
        self.cond = threading.Condition()

    def submit(self, cp: Checkpoint) -> None:
        with self.cond:
            self.got.append(cp)
            self.cond.notify_all()

    def wait(self, n: int, timeout: float = 10.0) -> list[Checkpoint]:
        with self.cond:
            self.cond.wait_for(lambda: len(self.got) >= n, timeout)
            return list(self.got)


def _write(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


@pytest.mark.parametrize("poll", [False, True])
def test_an_announced_file_outside_every_root_is_handed_over(tmp_path, poll):
    """Keras' order: the line, then the folder is made and the file written, then the next
    epoch's line. Settle 60 s: under polling only the log can complete it in time."""
    rec = Recorder()
    with CheckpointWatcher([], consumer=rec, cwd=str(tmp_path), poll=poll, settle=60) as w:
        sink = w.announcement_sink()
        sink.write([_ck("ckpt/best.keras", "keras", 3)])
        _write(tmp_path / "ckpt" / "best.keras", b"k" * 1000)
        sink.write([_metric(4)])
        got = rec.wait(1)
        assert [(c.name, c.root, [f.relpath for f in c.files]) for c in got] == [
            ("best.keras", str(tmp_path / "ckpt"), ["best.keras"])]
        sink.close()
    assert w.roots == [str(tmp_path / "ckpt")]


def test_files_of_this_run_already_in_an_announced_folder_settle_and_older_ones_stay(tmp_path):
    """YOLO's order: the weights are rewritten, then the line. The folder holds another file
    this run wrote (before it was watched) and one of an earlier run."""
    rec = Recorder()
    weights = tmp_path / "runs" / "weights"
    _write(weights / "epoch_1.pt", b"from an earlier run")
    os.utime(weights / "epoch_1.pt", (1, 1))
    with CheckpointWatcher([], consumer=rec, cwd=str(tmp_path), settle=0.2) as w:
        _write(weights / "last.pt", b"l" * 1000)
        _write(weights / "epoch_3.pt", b"3" * 1000)
        w.announcement_sink().write([_ck("runs/weights/last.pt", "stripped", 9)])
        rec.wait(2)
    assert sorted(c.name for c in rec.got) == ["epoch_3.pt", "last.pt"]


def test_an_announced_trainer_folder_is_handed_over_as_one_set(tmp_path):
    rec = Recorder()
    folder = tmp_path / "out" / "checkpoint-2"
    folder.mkdir(parents=True)   # the Trainer makes the folder before its line
    with CheckpointWatcher([], consumer=rec, cwd=str(tmp_path), settle=60) as w:
        sink = w.announcement_sink()
        sink.write([_ck("out/checkpoint-2", "trainer", 5)])
        for n in ("config.json", "model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json"):
            _write(folder / n, n.encode() * 100)
        sink.write([_metric(6)])   # the next log line: the save has ended
        (cp,) = rec.wait(1)
        sink.close()
    assert (cp.name, cp.iteration, cp.root) == ("checkpoint-2", 2, str(tmp_path / "out"))
    assert sorted(f.relpath for f in cp.files) == [
        "checkpoint-2/config.json", "checkpoint-2/model.safetensors", "checkpoint-2/optimizer.pt",
        "checkpoint-2/scheduler.pt", "checkpoint-2/trainer_state.json"]


def test_a_training_run_from_the_root_directory_still_watches_its_folders():
    assert directory_to_watch("/workspace/out/checkpoint-9", directory=True, cwd="/", home="/root") == "/workspace/out"
    assert directory_to_watch("model.keras", directory=False, cwd="/", home="/root") is None
