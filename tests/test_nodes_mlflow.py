"""Two nodes of one run into one MLflow store: each node's MLflow run is tagged with its node,
and a node's second attempt continues its own MLflow run, never the other node's (both carry
the same `trainvisor.run_id`)."""
from __future__ import annotations

import sys

import pytest

pytest.importorskip("mlflow", reason="the sink writes through mlflow-skinny (pip install 'trainvisor[mlflow]')")
from mlflow.tracking import MlflowClient  # noqa: E402

from trainvisor import Run, RunConfig  # noqa: E402
from trainvisor.config import ParsingConfig, RunDirConfig, SinksConfig  # noqa: E402

from .conftest import FAKE_CAFFE  # noqa: E402


def node_run(tmp_path, node: int, exit_code: int) -> None:
    uri = "file:" + str(tmp_path / "mlruns")
    config = RunConfig(
        command=(sys.executable, str(FAKE_CAFFE), "train", "--generate", "90", "--no-snapshots",
                 "--exit-code", str(exit_code)),
        parsing=ParsingConfig(parser="caffe", year=2026),
        run=RunDirConfig(id="multi", dir=str(tmp_path / f"n{node}"), node=node),
        sinks=SinksConfig(use=("mlflow",), options={"mlflow": {"tracking_uri": uri}}))
    with Run(config, stdout_fd=None, stderr_fd=None) as run:
        run.run()


def test_a_node_s_second_attempt_continues_its_own_mlflow_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow opens its local file store only when told
    node_run(tmp_path, 0, 3)
    node_run(tmp_path, 1, 3)
    node_run(tmp_path, 0, 0)  # node 0's attempt 2: its own MLflow run, the newer one is node 1's
    client = MlflowClient(tracking_uri="file:" + str(tmp_path / "mlruns"))
    experiment = client.get_experiment_by_name("trainvisor")
    runs = client.search_runs([experiment.experiment_id])
    got = sorted((r.data.tags["trainvisor.node"], r.data.tags["trainvisor.run_id"], r.data.tags["trainvisor.attempt"],
                  r.info.status) for r in runs)
    assert got == [("0", "multi", "2", "FINISHED"), ("1", "multi", "1", "FAILED")]
    assert all("trainvisor.process_rank" not in r.data.tags for r in runs)  # none was given
