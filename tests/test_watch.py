"""Checkpoint watching through the real observers (inotify, polling) on real files: completeness
(close, settle, renames, log announcements), late directories, policies through the watcher,
clean shutdown. The watcher's time is a fake clock the test moves; the test waits on what the
watcher has handled (`watch_helpers.Harness`), never sleeps."""
from __future__ import annotations

import os
import threading

import pytest

from trainvisor.events import CheckpointEvent, CheckpointFile, Metric
from trainvisor.watch import CheckpointWatcher, UploadPolicy, parse_policy
from trainvisor.watch.fsevents import FileClosed

from .watch_helpers import MB, Harness, Recorder, write_in_steps

# -- completeness ----------------------------------------------------------------------


@pytest.mark.parametrize("poll", [False, True], ids=["inotify", "polling"])
def test_slowly_written_checkpoint_is_handed_over_only_when_complete(tmp_path, poll):
    """Each chunk is seen and 0.1 s pass before the next; 0.9 s in all, three settle times."""
    rec = Recorder()
    path = tmp_path / "model_step_10.pt"
    with Harness([tmp_path], rec, poll=poll, settle=0.3) as h:
        last_write = write_in_steps(path, h, rec)
        got = h.settled(rec, 1, path)
    assert [c.name for c in got] == ["model_step_10.pt"]
    t, _, sizes = rec.got[0]
    assert t >= last_write and sizes == {"model_step_10.pt": 10 * MB}


@pytest.mark.parametrize("poll", [False, True], ids=["inotify", "polling"])
def test_new_checkpoint_written_slowly_into_a_deleted_ones_inode_is_not_taken_for_a_rename(tmp_path, poll):
    """The polling observer reports delete + create in the same inode as a move."""
    rec = Recorder()
    first, second = tmp_path / "m_step_1.pt", tmp_path / "m_step_2.pt"
    with Harness([tmp_path], rec, poll=poll, settle=0.3, poll_interval=0.05) as h:
        first.write_bytes(b"\0" * MB)
        h.settled(rec, 1, first)
        os.unlink(first)
        last_write = write_in_steps(second, h, rec, chunks=6)
        h.settled(rec, 2, second)
    assert rec.names == ["m_step_1.pt", "m_step_2.pt"]
    t, _, sizes = rec.got[1]
    assert t >= last_write and sizes == {"m_step_2.pt": 6 * MB}


@pytest.mark.parametrize("poll", [False, True], ids=["inotify", "polling"])
def test_caffe_set_waits_for_both_files(tmp_path, poll):
    rec = Recorder()
    weights = tmp_path / "lenet_iter_100.caffemodel"
    with Harness([tmp_path], rec, poll=poll, settle=0.2) as h:
        weights.write_bytes(b"w" * 1000)
        h.saw(weights)
        h.advance(0.6)  # three settle times: complete, yet alone
        assert rec.got == []
        (tmp_path / "lenet_iter_100.solverstate").write_bytes(b"s" * 10)
        got = h.settled(rec, 1, tmp_path / "lenet_iter_100.solverstate")
    assert len(got) == 1
    cp = got[0]
    assert (cp.name, cp.iteration, cp.framework, cp.root) == ("lenet_iter_100", 100, "caffe", str(tmp_path))
    assert sorted(f.relpath for f in cp.files) == ["lenet_iter_100.caffemodel", "lenet_iter_100.solverstate"]


def test_file_renamed_into_place_is_complete_and_the_temp_name_is_never_handed_over(tmp_path):
    rec = Recorder()
    with Harness([tmp_path], rec, settle=0.2) as h:
        tmp = tmp_path / "model_step_5.pt.tmp"
        write_in_steps(tmp, h, chunks=3)
        h.saw(tmp, kind=FileClosed)
        h.advance(0.2)
        assert rec.got == []
        os.rename(tmp, tmp_path / "model_step_5.pt")
        got = rec.wait(1)
    assert [c.files for c in got] == [(CheckpointFile(str(tmp_path / "model_step_5.pt"), "model_step_5.pt"),)]


def test_tensorflow_shards_and_index_are_one_set(tmp_path):
    rec = Recorder()
    with Harness([tmp_path], rec) as h:
        for name, data in (("model.ckpt-200.data-00000-of-00002", b"a"), ("model.ckpt-200.index", b"i")):
            (tmp_path / name).write_bytes(data)
            h.saw(tmp_path / name, kind=FileClosed)
        h.advance(0.3)
        assert rec.got == []
        (tmp_path / "model.ckpt-200.data-00001-of-00002").write_bytes(b"b")
        got = rec.wait(1)
    assert len(got) == 1 and len(got[0].files) == 3 and got[0].iteration == 200


def test_mxnet_symbol_file_is_attached_to_every_epoch(tmp_path):
    rec = Recorder()
    with Harness([tmp_path], rec):
        (tmp_path / "net-symbol.json").write_text("{}")
        (tmp_path / "net-0001.params").write_bytes(b"1")
        (tmp_path / "net-0002.params").write_bytes(b"2")
        got = rec.wait(2)
    assert [sorted(f.relpath for f in c.files) for c in got] == [
        ["net-0001.params", "net-symbol.json"], ["net-0002.params", "net-symbol.json"]]
    assert [c.epoch for c in got] == [1, 2]


@pytest.mark.parametrize("poll", [False, True], ids=["inotify", "polling"])
def test_file_rewritten_after_hand_over_is_handed_over_again(tmp_path, poll):
    rec = Recorder()
    path = tmp_path / "best.pth"
    with Harness([tmp_path], rec, poll=poll, settle=0.2) as h:
        path.write_bytes(b"a" * 100)
        h.settled(rec, 1, path)
        before = h.seen.count(path)
        path.write_bytes(b"b" * 250)
        h.settled(rec, 2, path, before)
        h.advance(0.5)  # more settle time: nothing new to hand over
    assert [s for _, _, s in rec.got] == [{"best.pth": 100}, {"best.pth": 250}]


def test_directories_created_after_start_are_watched(tmp_path):
    rec = Recorder()
    late = tmp_path / "runs" / "exp1" / "snapshots"
    with Harness([late], rec, settle=0.2) as h:
        late.mkdir(parents=True)
        (late / "model_step_1.pt").write_bytes(b"x")  # may land before the watch: found by the scan
        # A directory made while the watch on its parent was being set up raises no event: the
        # watcher re-resolves its pending watches every 0.5 s of its clock and finds it then.
        h.advance(0.5)
        h.settled(rec, 1, late / "model_step_1.pt")
        (late / "sub").mkdir()
        (late / "sub" / "model_step_2.pt").write_bytes(b"y")
        got = h.settled(rec, 2, late / "sub" / "model_step_2.pt")
    assert sorted(f.relpath for c in got for f in c.files) == ["model_step_1.pt", os.path.join("sub", "model_step_2.pt")]


def test_files_present_before_start_belong_to_an_earlier_run(tmp_path):
    (tmp_path / "model_step_1.pt").write_bytes(b"old")
    rec = Recorder()
    with Harness([tmp_path], rec) as h:
        (tmp_path / "model_step_2.pt").write_bytes(b"new")
        rec.wait(1)
        h.advance(h.watcher.settle)
    assert rec.names == ["model_step_2.pt"]


def test_weights_without_solverstate_are_handed_over_at_stop(tmp_path):
    rec = Recorder()
    with Harness([tmp_path], rec) as h:
        (tmp_path / "lenet_iter_7.caffemodel").write_bytes(b"w")
        h.saw(tmp_path / "lenet_iter_7.caffemodel", kind=FileClosed)
        h.advance(0.3)
        assert rec.got == []
    assert rec.names == ["lenet_iter_7"] and len(rec.got[0][1].files) == 1


def test_files_the_observer_never_reported_are_found_at_stop_and_handed_over_once_settled(tmp_path):
    """The observer's last events can be lost when it stops right after the training's
    last write; here it reports nothing at all, and the end-of-run check still finds
    the new checkpoint (and leaves the one from before the run alone)."""
    from watchdog.observers.polling import PollingObserver

    (tmp_path / "old_iter_1.caffemodel").write_bytes(b"old")
    (tmp_path / "old_iter_1.solverstate").write_bytes(b"old")
    rec = Recorder()
    with Harness([tmp_path], rec, settle=0.2, observer_factory=lambda: PollingObserver(timeout=3600)) as h:
        (tmp_path / "new_iter_2.caffemodel").write_bytes(b"w" * 10)
        (tmp_path / "new_iter_2.solverstate").write_bytes(b"s" * 10)
        h.advance(0.3)
        assert rec.got == []
    assert rec.names == ["new_iter_2"] and len(rec.got[0][1].files) == 2
    assert h.stats.partial == 0 and h.stats.completed_by == {"settle": 2}


def test_stop_leaves_no_thread_behind(tmp_path):
    before = set(threading.enumerate())
    w = CheckpointWatcher([tmp_path, tmp_path / "not-yet"], consumer=Recorder(), poll=False)
    w.start()
    assert len(set(threading.enumerate()) - before) >= 2
    w.stop()
    assert set(threading.enumerate()) - before == set()
    w = CheckpointWatcher([tmp_path], consumer=Recorder(), poll=True, settle=0.1).start()
    w.stop(drain=False)
    assert set(threading.enumerate()) - before == set()


def test_a_failing_consumer_does_not_stop_the_watcher(tmp_path):
    rec = Recorder()

    class Flaky:
        calls = 0

        def submit(self, cp):
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise RuntimeError("queue full")
            rec.submit(cp)

    with Harness([tmp_path], Flaky()) as h:
        (tmp_path / "a_step_1.pt").write_bytes(b"1")
        h.saw(tmp_path / "a_step_1.pt", kind=FileClosed)
        (tmp_path / "a_step_2.pt").write_bytes(b"2")
        rec.wait(1)
    assert rec.names == ["a_step_2.pt"] and h.stats.consumer_errors == 1


# -- log announcements -------------------------------------------------------------------

def _ck(path, kind, it, line):
    return CheckpointEvent(path=path, kind=kind, iteration=it, epoch=None, line=line, wall_time=0.0)


def _metric(it, line):
    return Metric("loss", 0.5, it, "train", None, None, None, 0.0, line)


def test_caffe_announcements_complete_files_the_polling_observer_has_not_settled(tmp_path):
    """Settle time 60 s: only the log can have completed these files."""
    rec = Recorder()
    snap = tmp_path / "snap"
    snap.mkdir()
    with Harness([snap], rec, poll=True, settle=60, cwd=str(tmp_path)) as h:
        sink = h.watcher.announcement_sink()
        sink.write([_ck("snap/lenet_iter_10.caffemodel", "weights", 10, 1)])  # printed BEFORE writing
        (snap / "lenet_iter_10.caffemodel").write_bytes(b"w" * 100)
        sink.write([_ck("snap/lenet_iter_10.solverstate", "solverstate", 10, 2)])  # proves the weights
        (snap / "lenet_iter_10.solverstate").write_bytes(b"s")
        h.advance(0.4)  # queued after the announcements: they have all been handled
        assert rec.got == []  # the solverstate is not proven until the log moves on
        sink.write([_metric(11, 3)])
        got = rec.wait(1)
        sink.close()
    assert [c.name for c in got] == ["lenet_iter_10"] and len(got[0].files) == 2


def test_weights_announcement_alone_proves_nothing(tmp_path):
    rec = Recorder()
    with Harness([tmp_path], rec, poll=True, settle=60, cwd=str(tmp_path)) as h:
        sink = h.watcher.announcement_sink()
        (tmp_path / "m_iter_1.caffemodel").write_bytes(b"half")
        sink.write([_ck("m_iter_1.caffemodel", "weights", 1, 1)])
        h.advance(0.3)
        assert rec.got == []
        sink.close()
        h.watcher.stop(drain=False)
    assert rec.got == []


def test_mxnet_saved_announcement_proves_the_file_at_once(tmp_path):
    rec = Recorder()
    with Harness([tmp_path], rec, poll=True, settle=60, cwd=str(tmp_path)) as h:
        (tmp_path / "net-0003.params").write_bytes(b"p")
        h.watcher.announcement_sink().write([_ck("net-0003.params", "params", None, 1)])
        got = rec.wait(1)
    assert [c.name for c in got] == ["net-0003"]


# -- policies through the watcher ----------------------------------------------------------

def test_policy_every_2_through_the_watcher_and_rewrites_of_skipped_sets_stay_skipped(tmp_path):
    rec = Recorder()
    with Harness([tmp_path], rec, policy=parse_policy("every-2")) as h:
        for i in range(1, 5):
            (tmp_path / f"m_step_{i}.pt").write_bytes(b"x")
            h.saw(tmp_path / f"m_step_{i}.pt", kind=FileClosed)
            h.advance(0.1)
        (tmp_path / "m_step_1.pt").write_bytes(b"again")
        h.saw(tmp_path / "m_step_1.pt", 1, kind=FileClosed)
        h.advance(0.3)
    assert rec.names == ["m_step_2.pt", "m_step_4.pt"] and h.stats.skipped_by_policy == 2


def test_policy_last_hands_over_each_set_as_it_completes_and_nothing_more_at_stop(tmp_path):
    """The upload queue, not the watcher, drops the superseded ones (uploaders/superseded.py):
    waiting for the end to hand over the newest lost every checkpoint of a killed node."""
    rec = Recorder()
    with Harness([tmp_path], rec, policy=UploadPolicy("last")) as h:
        for i in range(1, 4):
            (tmp_path / f"m_step_{i}.pt").write_bytes(b"x")
            h.saw(tmp_path / f"m_step_{i}.pt", kind=FileClosed)
            h.advance(0.1)
        h.advance(0.2)
        assert rec.names == ["m_step_1.pt", "m_step_2.pt", "m_step_3.pt"]
    assert rec.names == ["m_step_1.pt", "m_step_2.pt", "m_step_3.pt"]


def test_caffe_iteration_gets_an_epoch_from_iters_per_epoch(tmp_path):
    rec = Recorder()
    with Harness([tmp_path], rec, policy=parse_policy("all", iters_per_epoch=100)):
        (tmp_path / "n_iter_250.caffemodel").write_bytes(b"w")
        (tmp_path / "n_iter_250.solverstate").write_bytes(b"s")
        got = rec.wait(1)
    assert got[0].epoch == 2.5

