"""`params.get_value`: the job's JSON parameters by dotted keys, `default`, `is_required`; and
the workspace paths TrainInstance gives, under AVA_WORKSPACE."""
from __future__ import annotations

import json
import os

import pytest

from trainvisor.compat.ava import params
from trainvisor.compat.ava.params import ParamsError

PARAMS = {"solver": {"base_lr": 0.01, "lr_policy": "inv", "net.file": "lenet.prototxt"},
          "batch_size": 64, "gpus": [0, 1], "use_gpu": False, "empty": None}


@pytest.fixture
def params_file(tmp_path, monkeypatch):
    (tmp_path / "params").mkdir()
    path = tmp_path / "params" / "default.json"
    path.write_text(json.dumps(PARAMS))
    monkeypatch.setenv("AVA_WORKSPACE", str(tmp_path))
    monkeypatch.delenv("AVA_PARAMS_FILE", raising=False)
    return path


@pytest.mark.parametrize("key, value", [
    ("batch_size", 64), ("solver.base_lr", 0.01), ("solver.lr_policy", "inv"), ("gpus", [0, 1]),
    ("use_gpu", False), ("empty", None), ("solver.net.file", "lenet.prototxt"),
])
def test_a_dotted_key_walks_the_json_objects(params_file, key, value):
    assert params.get_value(key, default="unset") == value


def test_a_missing_key_gives_the_default_or_a_one_line_error_when_required(params_file):
    assert params.get_value("solver.momentum", default=0.9) == 0.9
    assert params.get_value("batch_size.x", default="no") == "no"  # a number has no keys
    with pytest.raises(ParamsError) as err:
        params.get_value("solver.momentum", is_required=True)
    assert str(err.value) == f"parameter 'solver.momentum' is required but not set in {params_file}"


def test_the_file_is_found_by_name_or_missing_or_refused(tmp_path, monkeypatch):
    other = tmp_path / "job.json"
    other.write_text('{"a": {"b": 3}}')
    monkeypatch.setenv("AVA_PARAMS_FILE", str(other))
    assert params.get_value("a.b") == 3 and params.get_all() == {"a": {"b": 3}}
    monkeypatch.setenv("AVA_PARAMS_FILE", str(tmp_path / "none.json"))
    assert params.get_all() == {} and params.get_value("a", default=1) == 1
    other.write_text("{not json")
    monkeypatch.setenv("AVA_PARAMS_FILE", str(other))
    with pytest.raises(ParamsError, match=r"job.json: not JSON: Expecting property name"):
        params.get_value("a")


def test_the_sdk_module_path_gives_the_same_calls(params_file):
    from trainvisor.compat.ava.params import params as sdk_params

    assert sdk_params.get_value("solver.base_lr") == 0.01


def test_train_instance_lays_out_the_workspace_under_its_root(tmp_path):
    from trainvisor.compat.ava.train.base import TrainInstance

    ins = TrainInstance(env={"AVA_WORKSPACE": str(tmp_path), "AVA_TRAINING_INS_ID": "job-7"}, log_to_file=False)
    assert ins.get_training_ins_id() == "job-7"
    assert ins.get_base_path() == str(tmp_path / "run" / "job-7")
    assert ins.get_snapshot_base_path() == str(tmp_path / "run" / "job-7" / "output")
    assert os.path.isdir(ins.get_snapshot_base_path()) and os.path.isdir(tmp_path / "run" / "job-7" / "logs")
    assert (ins.get_trainset_base_path(), ins.get_valset_base_path(), ins.get_testset_base_path()) == (
        str(tmp_path / "data" / "train"), str(tmp_path / "data" / "val"), str(tmp_path / "data" / "test"))
    assert ins.get_model_base_path() == str(tmp_path / "model")
    assert ins.done() is None  # nothing uploaded
    status = json.loads((tmp_path / "run" / "job-7" / "instance.json").read_text())
    assert status["instanceID"] == "job-7" and status["status"] == "done"
    local = TrainInstance(env={"AVA_WORKSPACE": str(tmp_path)}, log_to_file=False)
    assert local.get_training_ins_id().startswith("local-")  # no AVA backend to ask for an id
    assert local.get_monitor_callback("tensorflow") is None
    assert local.get_epoch_end_callback("caffe") is None  # no batch_of_epoch, as AVA
