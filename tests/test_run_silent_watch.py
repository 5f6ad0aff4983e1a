"""The default checkpoint locations a run with a destination and no --watch watches (a pure rule
over argv and the working directory), and the working directory watched shallow: its own files
are checkpoints, what lies below it (a dataset) is never walked nor watched."""
from __future__ import annotations

import logging

import pytest

from trainvisor.watch.defaults import DefaultLocations, default_locations, output_dirs
from trainvisor.watch.watcher import CheckpointWatcher

CWD, HOME = "/work/proj", "/home/u"
FIXED = (f"{CWD}/lightning_logs", f"{CWD}/checkpoints", f"{CWD}/trainer_output")


@pytest.mark.parametrize("argv,named", [
    (["python", "train.py"], ()),
    (["python", "run_glue.py", "--output_dir", "out/glue"], (f"{CWD}/out/glue",)),
    (["accelerate", "launch", "t.py", "--output-dir=/data/runs/x"], ("/data/runs/x",)),
    (["python", "t.py", "output_dir=res", "+trainer.default_root_dir=lt"], (f"{CWD}/res", f"{CWD}/lt")),
    (["python", "main.py", "fit", "--trainer.default_root_dir", "~/exp"], (f"{HOME}/exp",)),
    (["python", "t.py", "--checkpoint_dir", "ck", "--ckpt-dir", "ck"], (f"{CWD}/ck",)),  # once
    (["python", "t.py", "--output_dir", "checkpoints"], ()),  # a fixed default already
])
def test_default_locations_are_the_frameworks_and_the_named_output_directories(argv, named):
    assert default_locations(argv, cwd=CWD, home=HOME) == DefaultLocations(FIXED + named, (CWD,))


@pytest.mark.parametrize("argv", [
    ["python", "t.py", "--output_dir", "."],            # the working directory itself: its files are watched anyway
    ["python", "t.py", "--output_dir", ".."],           # an ancestor: would hold the datasets
    ["python", "t.py", "--output_dir", "~"],            # the home directory
    ["python", "t.py", "--output_dir", "gs://bucket/run"],  # not local
    ["python", "t.py", "--output_dir", "--do_train"],   # a flag, not the missing value
    ["python", "t.py", "--output_dir"],                 # no value at all
    ["python", "output_dir", "x"],                      # a bare word is not an option
])
def test_output_directories_that_would_watch_too_much_or_nothing_are_left_out(argv):
    assert default_locations(argv, cwd=CWD, home=HOME) == DefaultLocations(FIXED, (CWD,))


def test_a_shell_command_line_is_read_as_the_shell_splits_it():
    line = ["python run.py --output_dir 'my out' && echo done"]
    assert default_locations(line, cwd=CWD, home=HOME, shell=True).recursive == FIXED + (f"{CWD}/my out",)
    assert default_locations(["python t.py --output_dir 'x"], cwd=CWD, home=HOME, shell=True).recursive == FIXED
    assert default_locations(line, cwd=CWD, home=HOME).recursive == FIXED  # one word, not options


def test_output_dirs_keeps_the_order_of_the_command_line():
    assert output_dirs(["t.py", "--output_dir=b", "--save", "x", "ckpt_dir=a"]) == ["b", "a"]


class Collect:
    def __init__(self) -> None:
        self.names: list[str] = []

    def submit(self, checkpoint) -> None:
        self.names += [f.relpath for f in checkpoint.files]


def write(path, data: bytes = b"w" * 1024) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def test_a_shallow_root_hands_over_its_own_files_and_never_those_below_it(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write(data / "old.pt")  # before the run, below: neither walked nor uploaded
    consumer = Collect()
    watcher = CheckpointWatcher([], consumer=consumer, cwd=str(tmp_path), shallow=[str(tmp_path)], settle=0.2)
    assert watcher.roots == [str(tmp_path)]
    watcher.start()
    try:
        write(tmp_path / "model.pt")
        write(data / "new.pt")                 # a file below the root, during the run
        (tmp_path / "more").mkdir()            # a directory appearing below it
        write(tmp_path / "more" / "late.ckpt")
        watcher.watch_announced("more/late.ckpt")  # announced below it: that directory becomes a root
        write(tmp_path / "notes.txt")          # not a checkpoint name
    finally:
        watcher.stop(drain=True)
    assert sorted(consumer.names) == ["late.ckpt", "model.pt"]
    assert sorted(watcher.roots) == [str(tmp_path), str(tmp_path / "more")]


def test_a_file_announced_in_a_shallow_root_is_not_said_to_be_unwatched(tmp_path, caplog):
    consumer = Collect()
    watcher = CheckpointWatcher([], consumer=consumer, cwd=str(tmp_path), shallow=[str(tmp_path)], settle=0.2)
    logger = logging.getLogger("trainvisor.watch")  # a run may have stopped it propagating: listen on it
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="trainvisor.watch"):
            watcher.start()
            try:
                write(tmp_path / "best.keras")
                watcher.watch_announced("best.keras")
                watcher.watch_announced("sub/../elsewhere.keras")  # the same directory, written another way
                watcher.announce("best.keras")
            finally:
                watcher.stop(drain=True)
    finally:
        logger.removeHandler(caplog.handler)
    assert consumer.names == ["best.keras"]
    assert "checkpoint best.keras complete (1 files), handed to the uploader" in caplog.text
    assert "announced where the run does not watch" not in caplog.text
