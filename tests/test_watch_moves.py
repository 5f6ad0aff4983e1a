"""Checkpoints moved into place (Lightning, Hugging Face and torch.save wrappers write a temporary
file, often in /tmp, then move it into the checkpoint folder) are handed over within a second
of the move by the real watcher: with inotify by the move event, under polling by the file's
ctime (the move) being later than its mtime (the last write)."""
from __future__ import annotations

import os
import time

import pytest

from trainvisor.watch.fsevents import FileDeleted

from .watch_helpers import MB, Harness, Recorder, write_in_steps


@pytest.fixture
def dirs(tmp_path):
    """The watched checkpoint folder and a temporary folder outside the watched tree."""
    watched, outside = tmp_path / "ckpt", tmp_path / "tmp"
    watched.mkdir()
    outside.mkdir()
    return watched, outside


@pytest.mark.parametrize("poll", [False, True], ids=["inotify", "polling"])
def test_file_moved_in_from_another_directory_is_handed_over_within_a_second(dirs, poll):
    watched, outside = dirs
    rec = Recorder()
    # A settle time far beyond the second, on a clock that does not move: the move itself must
    # prove the file complete (under polling: its ctime, set by the move, after its mtime).
    with Harness([watched], rec, poll=poll, settle=30, poll_interval=0.05) as h:
        write_in_steps(outside / "tmpab12cd", None, chunks=3)
        # The write ended a second before the move, as a real save does some time before it: the
        # filesystem's timestamps are coarse, a move in the same tick as the write leaves ctime == mtime.
        st = os.stat(outside / "tmpab12cd")
        os.utime(outside / "tmpab12cd", ns=(st.st_atime_ns, st.st_mtime_ns - 1_000_000_000))
        moved = time.monotonic()
        os.rename(outside / "tmpab12cd", watched / "epoch=0-step=100.ckpt")
        got = rec.wait(1, timeout=2.0)
        assert [c.name for c in got] == ["epoch=0-step=100.ckpt"]
        assert rec.got[0][0] - moved < 1.0
        assert rec.got[0][2] == {"epoch=0-step=100.ckpt": 3 * MB}
    assert h.stats.completed_by == {"rename": 1}
    assert len(rec.got) == 1


def test_file_replaced_by_a_move_from_outside_is_handed_over_again_at_once(dirs):
    """Lightning's `last.ckpt`: rewritten each epoch by moving a new temporary file over it."""
    watched, outside = dirs
    rec = Recorder()
    with Harness([watched], rec, settle=30) as h:
        for i, size in enumerate((100, 250)):
            (outside / "t").write_bytes(b"x" * size)
            os.replace(outside / "t", watched / "last.ckpt")
            rec.wait(i + 1, timeout=1.0)
        assert [s for _, _, s in rec.got] == [{"last.ckpt": 100}, {"last.ckpt": 250}]
    assert h.stats.completed_by == {"rename": 2}


def test_file_moved_out_of_the_watched_tree_is_never_handed_over(dirs):
    watched, outside = dirs
    rec = Recorder()
    path = watched / "model_step_3.pt"
    with Harness([watched], rec, settle=0.2) as h:
        with open(path, "wb") as fh:  # still open: not complete
            fh.write(b"x" * 10)
            fh.flush()
            h.saw(path)
            os.rename(path, outside / "model_step_3.pt")
        h.saw(path, kind=FileDeleted)
        h.advance(0.3)  # more than the settle time
    assert rec.got == [] and h.stats.handed_over == 0
