"""Which node and ranks a trainvisor process is, from the variables each launcher sets (the
precedence table of trainvisor/identity.py), the config keys over them, and bad values refused
in one line."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from trainvisor.errors import ConfigError
from trainvisor.identity import NodeIdentity, precedence

# What each launcher sets for the process it starts (the variables its documentation names).
TORCHRUN_WORKER = {"RANK": "5", "LOCAL_RANK": "1", "GROUP_RANK": "1", "ROLE_RANK": "5", "LOCAL_WORLD_SIZE": "4",
                   "WORLD_SIZE": "8", "MASTER_ADDR": "n0", "MASTER_PORT": "29500"}
KUBEFLOW_POD = {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"}
SLURM_TASK = {"SLURM_NODEID": "1", "SLURM_PROCID": "9", "SLURM_LOCALID": "1", "SLURM_NTASKS": "16"}

CASES = [
    ("nothing: one machine", {}, (None, None, None, "")),
    ("Lightning's NODE_RANK", {"NODE_RANK": "2"}, (2, None, None, "NODE_RANK")),
    ("NODE_RANK over torchrun's GROUP_RANK", {**TORCHRUN_WORKER, "NODE_RANK": "2"}, (2, 5, 1, "NODE_RANK")),
    ("a torchrun worker", TORCHRUN_WORKER, (1, 5, 1, "GROUP_RANK")),
    ("a Kubeflow PyTorchJob pod: RANK is the pod's index", KUBEFLOW_POD, (3, 3, None, "RANK")),
    ("RANK with LOCAL_RANK is a process's rank, not a node's", {"RANK": "6", "LOCAL_RANK": "2"}, (None, 6, 2, "")),
    ("a Kubernetes Indexed Job", {"JOB_COMPLETION_INDEX": "4"}, (4, None, None, "JOB_COMPLETION_INDEX")),
    ("a Slurm task", SLURM_TASK, (1, 9, 1, "SLURM_NODEID")),
    ("SLURM_NODEID over JOB_COMPLETION_INDEX", {**SLURM_TASK, "JOB_COMPLETION_INDEX": "7"}, (1, 9, 1, "SLURM_NODEID")),
    ("GROUP_RANK over SLURM_NODEID (torchrun under srun)", {**SLURM_TASK, **TORCHRUN_WORKER},
     (1, 5, 1, "GROUP_RANK")),
    ("an empty variable is not set", {"NODE_RANK": "", "SLURM_NODEID": " 3 "}, (3, None, None, "SLURM_NODEID")),
]


@pytest.mark.parametrize("environ,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_launcher_s_variables_give_the_node_and_ranks(environ, expected):
    got = NodeIdentity.from_environ(environ)
    assert (got.node, got.process_rank, got.local_rank, got.node_from) == expected


def test_the_config_keys_win_over_every_variable():
    got = NodeIdentity.from_environ({**TORCHRUN_WORKER, "NODE_RANK": "2"}, node=7, process_rank=0, local_rank=0)
    assert (got.node, got.process_rank, got.local_rank, got.node_from) == (7, 0, 0, "run.node")
    assert got.describe() == "node 7, process rank 0, local rank 0 (node from run.node)"


def test_the_precedence_table_is_the_order_used():
    assert precedence() == {
        "node": ("run.node", "NODE_RANK", "GROUP_RANK", "SLURM_NODEID", "JOB_COMPLETION_INDEX", "RANK"),
        "process_rank": ("run.process_rank", "RANK", "SLURM_PROCID"),
        "local_rank": ("run.local_rank", "LOCAL_RANK", "SLURM_LOCALID"),
    }


def test_what_records_carry_and_where_the_store_keeps_a_node_s_sets():
    one_machine = NodeIdentity.from_environ({})
    assert (one_machine.is_set, one_machine.fields(), one_machine.folder, one_machine.uploads) == (False, {}, "", True)
    worker = NodeIdentity.from_environ(TORCHRUN_WORKER)
    assert worker.fields() == {"node": 1, "process_rank": 5}
    assert (worker.folder, worker.uploads) == ("node-1", False)  # local rank 1: its node's rank 0 uploads
    pod = NodeIdentity.from_environ({"NODE_RANK": "2", "LOCAL_RANK": "0"})
    assert (pod.fields(), pod.folder, pod.uploads) == ({"node": 2}, "node-2", True)


@pytest.mark.parametrize("value", ["one", "-1", "1.5", "²"])
def test_a_value_that_is_no_whole_number_is_one_line_naming_the_variable(value):
    with pytest.raises(ConfigError) as err:
        NodeIdentity.from_environ({"GROUP_RANK": value, "RANK": "0", "LOCAL_RANK": "0"})
    assert str(err.value) == f"GROUP_RANK={value!r}: a node or rank must be a whole number, 0 or more"


def test_a_bad_variable_or_key_stops_trainvisor_run_before_the_training(tmp_path, fake_caffe):
    base = dict(os.environ)
    cmd = [sys.executable, "-m", "trainvisor", "run", "--run-dir", str(tmp_path / "run"), "--", *fake_caffe,
           "train", "--generate", "9"]
    bad_env = subprocess.run(cmd, env={**base, "SLURM_PROCID": "x1"}, capture_output=True, text=True, timeout=120)
    assert (bad_env.returncode, bad_env.stdout) == (2, "")
    assert bad_env.stderr == "trainvisor: SLURM_PROCID='x1': a node or rank must be a whole number, 0 or more\n"
    bad_key = subprocess.run(cmd, env={**base, "TRAINVISOR__RUN__NODE": "-1"}, capture_output=True, text=True,
                             timeout=120)
    assert bad_key.returncode == 2 and bad_key.stderr.count("\n") == 1, bad_key.stderr
    assert "run.node" in bad_key.stderr and "must be at least 0" in bad_key.stderr
    assert not (tmp_path / "run").exists()
