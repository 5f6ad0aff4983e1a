"""Checkpoint watching: recognisers, completeness (inotify, polling, renames, log
announcements), late directories, policies, the Caffe solver, clean shutdown."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from trainvisor.errors import ConfigError
from trainvisor.events import Checkpoint, CheckpointEvent, CheckpointFile, Metric
from trainvisor.watch import CheckpointWatcher, UploadPolicy, default_recognizers, parse_policy
from trainvisor.watch.caffe_solver import read_solver_snapshot, solver_path_from_argv, snapshot_target
from trainvisor.watch.recognizers import recognize

MB = 1 << 20


class Recorder:
    """A consumer that records each checkpoint with the sizes its files had when handed over."""

    def __init__(self) -> None:
        self.got: list[tuple[float, Checkpoint, dict[str, int]]] = []
        self.cond = threading.Condition()

    def submit(self, cp: Checkpoint) -> None:
        sizes = {f.relpath: os.path.getsize(f.path) for f in cp.files}
        with self.cond:
            self.got.append((time.monotonic(), cp, sizes))
            self.cond.notify_all()

    def wait(self, n: int, timeout: float = 5.0) -> list[Checkpoint]:
        with self.cond:
            self.cond.wait_for(lambda: len(self.got) >= n, timeout)
            return [cp for _, cp, _ in self.got]

    @property
    def names(self) -> list[str]:
        return [cp.name for _, cp, _ in self.got]


def write_slowly(path: Path, *, chunks: int = 10, chunk: int = MB, pause: float = 0.1) -> float:
    """1 MB every 100 ms; returns the monotonic time of the last write (just before
    the close: the watcher may react to the close before this thread runs again)."""
    with open(path, "wb") as fh:
        for i in range(chunks):
            fh.write(b"\0" * chunk)
            fh.flush()
            if i < chunks - 1:
                time.sleep(pause)
        last_write = time.monotonic()
    return last_write


# -- recognisers -----------------------------------------------------------------------

RECOGNISED = [
    # (file name, framework, set, role, iteration, epoch)
    ("lenet_iter_500.caffemodel", "caffe", "lenet_iter_500", "weights", 500, None),
    ("lenet_iter_500.solverstate", "caffe", "lenet_iter_500", "solverstate", 500, None),
    ("lenet_iter_500.caffemodel.h5", "caffe", "lenet_iter_500", "weights", 500, None),
    ("lenet_iter_500.solverstate.h5", "caffe", "lenet_iter_500", "solverstate", 500, None),
    ("resnet-0012.params", "mxnet", "resnet-0012", "params", None, 12),
    ("resnet-symbol.json", "mxnet", "resnet", "symbol", None, None),
    ("model.ckpt-1000.index", "tensorflow", "model.ckpt-1000", "index", 1000, None),
    ("model.ckpt-1000.data-00001-of-00002", "tensorflow", "model.ckpt-1000", "data-1-of-2", 1000, None),
    ("weights.05-0.23.hdf5", "keras", "weights.05-0.23.hdf5", "file", None, 5),
    ("model_epoch_7.keras", "keras", "model_epoch_7.keras", "file", None, 7),
    ("best.h5", "keras", "best.h5", "file", None, None),
    ("epoch=3-step=1200.ckpt", "pytorch", "epoch=3-step=1200.ckpt", "file", 1200, 3),
    ("model_step_500.pt", "pytorch", "model_step_500.pt", "file", 500, None),
    ("checkpoint.pth.tar", "pytorch", "checkpoint.pth.tar", "file", None, None),
    ("model_temp.pt", "pytorch", "model_temp.pt", "file", None, None),
]


@pytest.mark.parametrize("name,framework,set_name,role,iteration,epoch", RECOGNISED, ids=[r[0] for r in RECOGNISED])
def test_recogniser_names_the_set_role_and_numbers(name, framework, set_name, role, iteration, epoch):
    rec, part = recognize(name, default_recognizers())
    assert (rec.name, part.set_name, part.role, part.iteration, part.epoch) == (
        framework, set_name, role, iteration, epoch)


@pytest.mark.parametrize("name", [
    "model.pt.tmp", "lenet_iter_5.caffemodel.partial", ".~lock.model.pt", "model.ckpt-1.data-00000-of-00001.tempstate88",
    "weights.h5.swp", "model.pt~", "train.log", "solver.prototxt", "lenet_iter_5.caffemodel.bak",
])
def test_temporary_and_unrelated_files_are_not_checkpoints(name):
    assert recognize(name, default_recognizers()) is None


def test_user_patterns_glob_and_regex_with_named_numbers():
    recs = default_recognizers(["snap_*.bin", r"re:net_(?P<epoch>\d+)_(?P<iter>\d+)\.w"])
    assert recognize("snap_1.bin", recs)[1].framework == "pattern"
    part = recognize("net_3_900.w", recs)[1]
    assert (part.epoch, part.iteration) == (3, 900)
    assert recognize("other.bin", recs) is None


def test_bad_user_regex_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="checkpoint-pattern"):
        default_recognizers(["re:(unclosed"])


def test_tensorflow_set_needs_index_and_every_shard():
    rec = default_recognizers(frameworks=["tensorflow"])[0]
    assert rec.required_roles(frozenset({"index"})) is None
    assert rec.required_roles(frozenset({"data-0-of-2"})) == {"index", "data-0-of-2", "data-1-of-2"}


# -- completeness ----------------------------------------------------------------------

@pytest.mark.parametrize("poll", [False, True], ids=["inotify", "polling"])
def test_slowly_written_checkpoint_is_handed_over_only_when_complete(tmp_path, poll):
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec, poll=poll, settle=0.3):
        last_write = write_slowly(tmp_path / "model_step_10.pt")
        got = rec.wait(1)
    assert [c.name for c in got] == ["model_step_10.pt"]
    t, _, sizes = rec.got[0]
    assert t >= last_write and sizes == {"model_step_10.pt": 10 * MB}


@pytest.mark.parametrize("poll", [False, True], ids=["inotify", "polling"])
def test_new_checkpoint_written_slowly_into_a_deleted_ones_inode_is_not_taken_for_a_rename(tmp_path, poll):
    """The polling observer reports delete + create in the same inode as a move."""
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec, poll=poll, settle=0.3, poll_interval=0.05):
        (tmp_path / "m_step_1.pt").write_bytes(b"\0" * MB)
        rec.wait(1)
        os.unlink(tmp_path / "m_step_1.pt")
        last_write = write_slowly(tmp_path / "m_step_2.pt", chunks=6)
        rec.wait(2)
    assert rec.names == ["m_step_1.pt", "m_step_2.pt"]
    t, _, sizes = rec.got[1]
    assert t >= last_write and sizes == {"m_step_2.pt": 6 * MB}


@pytest.mark.parametrize("poll", [False, True], ids=["inotify", "polling"])
def test_caffe_set_waits_for_both_files(tmp_path, poll):
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec, poll=poll, settle=0.2):
        (tmp_path / "lenet_iter_100.caffemodel").write_bytes(b"w" * 1000)
        time.sleep(0.6)
        assert rec.got == []
        (tmp_path / "lenet_iter_100.solverstate").write_bytes(b"s" * 10)
        got = rec.wait(1)
    assert len(got) == 1
    cp = got[0]
    assert (cp.name, cp.iteration, cp.framework, cp.root) == ("lenet_iter_100", 100, "caffe", str(tmp_path))
    assert sorted(f.relpath for f in cp.files) == ["lenet_iter_100.caffemodel", "lenet_iter_100.solverstate"]


def test_file_renamed_into_place_is_complete_and_the_temp_name_is_never_handed_over(tmp_path):
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec, settle=0.2):
        tmp = tmp_path / "model_step_5.pt.tmp"
        write_slowly(tmp, chunks=3)
        time.sleep(0.2)
        assert rec.got == []
        os.rename(tmp, tmp_path / "model_step_5.pt")
        got = rec.wait(1)
    assert [c.files for c in got] == [(CheckpointFile(str(tmp_path / "model_step_5.pt"), "model_step_5.pt"),)]


def test_tensorflow_shards_and_index_are_one_set(tmp_path):
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec):
        (tmp_path / "model.ckpt-200.data-00000-of-00002").write_bytes(b"a")
        (tmp_path / "model.ckpt-200.index").write_bytes(b"i")
        time.sleep(0.3)
        assert rec.got == []
        (tmp_path / "model.ckpt-200.data-00001-of-00002").write_bytes(b"b")
        got = rec.wait(1)
    assert len(got) == 1 and len(got[0].files) == 3 and got[0].iteration == 200


def test_mxnet_symbol_file_is_attached_to_every_epoch(tmp_path):
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec):
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
    with CheckpointWatcher([tmp_path], consumer=rec, poll=poll, settle=0.2):
        path.write_bytes(b"a" * 100)
        rec.wait(1)
        time.sleep(0.1)
        path.write_bytes(b"b" * 250)
        rec.wait(2)
        time.sleep(0.5)
    assert [s for _, _, s in rec.got] == [{"best.pth": 100}, {"best.pth": 250}]


def test_directories_created_after_start_are_watched(tmp_path):
    rec = Recorder()
    late = tmp_path / "runs" / "exp1" / "snapshots"
    with CheckpointWatcher([late], consumer=rec, settle=0.2):
        time.sleep(0.1)
        late.mkdir(parents=True)
        (late / "model_step_1.pt").write_bytes(b"x")  # may land before the watch: found by the scan
        time.sleep(0.3)
        (late / "sub").mkdir()
        (late / "sub" / "model_step_2.pt").write_bytes(b"y")
        got = rec.wait(2)
    assert sorted(f.relpath for c in got for f in c.files) == ["model_step_1.pt", os.path.join("sub", "model_step_2.pt")]


def test_files_present_before_start_belong_to_an_earlier_run(tmp_path):
    (tmp_path / "model_step_1.pt").write_bytes(b"old")
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec):
        (tmp_path / "model_step_2.pt").write_bytes(b"new")
        rec.wait(1)
        time.sleep(0.2)
    assert rec.names == ["model_step_2.pt"]


def test_weights_without_solverstate_are_handed_over_at_stop(tmp_path):
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec):
        (tmp_path / "lenet_iter_7.caffemodel").write_bytes(b"w")
        time.sleep(0.3)
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
    with CheckpointWatcher([tmp_path], consumer=rec, settle=0.2,
                           observer_factory=lambda: PollingObserver(timeout=3600)) as w:
        (tmp_path / "new_iter_2.caffemodel").write_bytes(b"w" * 10)
        (tmp_path / "new_iter_2.solverstate").write_bytes(b"s" * 10)
        time.sleep(0.3)
        assert rec.got == []
    assert rec.names == ["new_iter_2"] and len(rec.got[0][1].files) == 2
    assert w.stats.partial == 0 and w.stats.completed_by == {"settle": 2}


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

    with CheckpointWatcher([tmp_path], consumer=Flaky()) as w:
        (tmp_path / "a_step_1.pt").write_bytes(b"1")
        time.sleep(0.3)
        (tmp_path / "a_step_2.pt").write_bytes(b"2")
        rec.wait(1)
    assert rec.names == ["a_step_2.pt"] and w.stats.consumer_errors == 1


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
    with CheckpointWatcher([snap], consumer=rec, poll=True, settle=60, cwd=str(tmp_path)) as w:
        sink = w.announcement_sink()
        sink.write([_ck("snap/lenet_iter_10.caffemodel", "weights", 10, 1)])  # printed BEFORE writing
        (snap / "lenet_iter_10.caffemodel").write_bytes(b"w" * 100)
        sink.write([_ck("snap/lenet_iter_10.solverstate", "solverstate", 10, 2)])  # proves the weights
        (snap / "lenet_iter_10.solverstate").write_bytes(b"s")
        time.sleep(0.4)
        assert rec.got == []  # the solverstate is not proven until the log moves on
        sink.write([_metric(11, 3)])
        got = rec.wait(1)
        sink.close()
    assert [c.name for c in got] == ["lenet_iter_10"] and len(got[0].files) == 2


def test_weights_announcement_alone_proves_nothing(tmp_path):
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec, poll=True, settle=60, cwd=str(tmp_path)) as w:
        sink = w.announcement_sink()
        (tmp_path / "m_iter_1.caffemodel").write_bytes(b"half")
        sink.write([_ck("m_iter_1.caffemodel", "weights", 1, 1)])
        time.sleep(0.3)
        assert rec.got == []
        sink.close()
        w.stop(drain=False)
    assert rec.got == []


def test_mxnet_saved_announcement_proves_the_file_at_once(tmp_path):
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec, poll=True, settle=60, cwd=str(tmp_path)) as w:
        (tmp_path / "net-0003.params").write_bytes(b"p")
        w.announcement_sink().write([_ck("net-0003.params", "params", None, 1)])
        got = rec.wait(1)
    assert [c.name for c in got] == ["net-0003"]


# -- policies ---------------------------------------------------------------------------

def _cp(name, iteration=None, epoch=None):
    return Checkpoint(name, (), iteration, epoch, "/r", "x")


def test_policy_epoch_end_uses_iters_per_epoch_and_uploads_the_undecidable():
    p = parse_policy("epoch-end", iters_per_epoch=500)
    assert [p.selects(_cp("a", it), 1) for it in (500, 750, 1000)] == [True, False, True]
    assert p.selects(_cp("k", epoch=4), 1) and p.selects(_cp("unknown"), 1)
    assert parse_policy("epoch-end").selects(_cp("c", 750), 1)  # no iters_per_epoch: undecidable -> uploaded


def test_policy_every_n_counts_checkpoints():
    p = parse_policy("every-3")
    assert [p.selects(_cp(str(i)), i) for i in range(1, 7)] == [False, False, True, False, False, True]


@pytest.mark.parametrize("bad", ["some", "every-0", "every-x"])
def test_bad_policy_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="upload-policy"):
        parse_policy(bad)


def test_policy_every_2_through_the_watcher_and_rewrites_of_skipped_sets_stay_skipped(tmp_path):
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec, policy=parse_policy("every-2")) as w:
        for i in range(1, 5):
            (tmp_path / f"m_step_{i}.pt").write_bytes(b"x")
            time.sleep(0.1)
        (tmp_path / "m_step_1.pt").write_bytes(b"again")
        time.sleep(0.3)
    assert rec.names == ["m_step_2.pt", "m_step_4.pt"] and w.stats.skipped_by_policy == 2


def test_policy_last_hands_over_only_the_newest_at_stop(tmp_path):
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec, policy=UploadPolicy("last")):
        for i in range(1, 4):
            (tmp_path / f"m_step_{i}.pt").write_bytes(b"x")
            time.sleep(0.1)
        time.sleep(0.2)
        assert rec.got == []
    assert rec.names == ["m_step_3.pt"]


def test_caffe_iteration_gets_an_epoch_from_iters_per_epoch(tmp_path):
    rec = Recorder()
    with CheckpointWatcher([tmp_path], consumer=rec, policy=parse_policy("all", iters_per_epoch=100)):
        (tmp_path / "n_iter_250.caffemodel").write_bytes(b"w")
        (tmp_path / "n_iter_250.solverstate").write_bytes(b"s")
        got = rec.wait(1)
    assert got[0].epoch == 2.5


# -- Caffe solver -----------------------------------------------------------------------

@pytest.mark.parametrize("argv,solver", [
    (["caffe", "train", "-solver", "s.prototxt"], "s.prototxt"),
    (["/opt/caffe/build/tools/caffe", "train", "--solver=s.prototxt", "-gpu", "0"], "s.prototxt"),
    (["caffe", "train", "-solver=x/s.prototxt"], "x/s.prototxt"),
    (["caffe train --solver 's t.prototxt' 2>&1"], "s t.prototxt"),
    (["caffe", "test", "-solver", "s.prototxt"], None),
    (["python", "train.py", "--solver", "s.prototxt"], None),
])
def test_solver_path_from_caffe_argv(argv, solver):
    assert solver_path_from_argv(argv) == solver


def test_solver_snapshot_prefix_is_resolved_against_the_childs_cwd(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "solver.prototxt").write_text(
        'net: "x"\n# snapshot_prefix: "commented/out"\nsnapshot: 5000\n'
        'snapshot_prefix: "snapshots/lenet"  # trailing comment\nsnapshot_format: HDF5\n')
    s = snapshot_target(["caffe", "train", "-solver", "models/solver.prototxt"], cwd=str(tmp_path))
    assert (s.directory, s.prefix, s.interval, s.hdf5) == (str(tmp_path / "snapshots"), "lenet", 5000, True)


def test_solver_prefix_that_is_a_directory_or_missing_follows_caffe(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "a.prototxt").write_text("snapshot_prefix: 'out'\n")
    (tmp_path / "b.prototxt").write_text("base_lr: 0.01\n")
    a = read_solver_snapshot("a.prototxt", cwd=str(tmp_path))
    b = read_solver_snapshot("b.prototxt", cwd=str(tmp_path))
    assert (a.directory, a.prefix) == (str(tmp_path / "out"), "a")
    assert (b.directory, b.prefix) == (str(tmp_path), "b")


def test_unreadable_solver_is_a_config_error_naming_the_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read solver missing.prototxt"):
        read_solver_snapshot("missing.prototxt", cwd=str(tmp_path))


def test_fan_out_reaches_every_consumer_when_one_fails(tmp_path):
    from trainvisor.watch.record import CheckpointRecord, FanOut

    class Broken:
        def submit(self, cp):
            raise OSError("disk full")

    rec = Recorder()
    (tmp_path / "a.pt").write_bytes(b"abc")
    cp = Checkpoint("a.pt", (CheckpointFile(str(tmp_path / "a.pt"), "a.pt"),), 3, None, str(tmp_path), "pytorch")
    with pytest.raises(OSError):
        FanOut([Broken(), rec, CheckpointRecord(tmp_path / "cps.jsonl")]).submit(cp)
    import json

    line = json.loads((tmp_path / "cps.jsonl").read_text())
    assert rec.names == ["a.pt"] and line["files"] == [{"path": str(tmp_path / "a.pt"), "relpath": "a.pt", "size": 3}]
