"""What the watcher decides without watching: checkpoint names (recognisers), upload policies,
the Caffe solver's snapshot directory, and the fan-out to several consumers."""
from __future__ import annotations

import json

import pytest

from trainvisor.errors import ConfigError
from trainvisor.events import Checkpoint, CheckpointFile
from trainvisor.watch import default_recognizers, parse_policy
from trainvisor.watch.caffe_solver import read_solver_snapshot, solver_path_from_argv, snapshot_target
from trainvisor.watch.recognizers import recognize

from .watch_helpers import Recorder


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
    line = json.loads((tmp_path / "cps.jsonl").read_text())
    assert rec.names == ["a.pt"] and line["files"] == [{"path": str(tmp_path / "a.pt"), "relpath": "a.pt", "size": 3}]
