"""The `mlflow` sink: real logs replayed through it on its own thread (as a run gives it one) into
a local MLflow store under tmp_path, and read back with MLflow's own client (`MlflowClient`,
`get_metric_history`): every metric of metrics.jsonl with its value and step, NaN and infinities
included; the run's masked configuration as params; FINISHED / FAILED / KILLED from how the
training ended; a real `trainvisor run --sink mlflow`; a store that cannot be written counted,
the training unaffected; making the sink imports no mlflow."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlflow", reason="the sink writes through mlflow-skinny (pip install 'trainvisor[mlflow]')")
from mlflow.tracking import MlflowClient  # noqa: E402

import trainvisor  # noqa: E402
from trainvisor import Run, RunConfig  # noqa: E402
from trainvisor.config import ParsingConfig, ProcessConfig, RunDirConfig, SinksConfig  # noqa: E402
from trainvisor.config.convert import to_dict  # noqa: E402
from trainvisor.errors import ConfigError  # noqa: E402
from trainvisor.sinks.context import SinkContext  # noqa: E402
from trainvisor.sinks.jsonl import read_jsonl  # noqa: E402
from trainvisor.sinks.registry import make_sink  # noqa: E402
from trainvisor.sinks.threaded import CloseDeadline, ThreadedSink  # noqa: E402

from .conftest import FAKE_CAFFE, ROOT, real_logs  # noqa: E402
from .scalar_helpers import expected_scalars  # noqa: E402

GENERATED_METRICS = 91  # fake-caffe's generated 600-iteration log: the metrics the run's JSONL holds


@pytest.fixture(autouse=True)
def file_store_allowed(monkeypatch):
    """MLflow 3.13+ opens its local file store only when told to (see the sink's docstring)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)


def _store(tmp_path: Path) -> str:
    return "file:" + str(tmp_path / "mlruns")


def _only_run(uri: str, experiment: str = "trainvisor"):
    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment!r} in {uri}"
    (run,) = client.search_runs([found.experiment_id])
    return client, run


def _history(client: MlflowClient, run) -> dict:
    """{key: [(step, value)...]} of every metric the run holds, as MLflow gives them back."""
    return {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
            for key in run.data.metrics}


def _expected(metrics: list) -> dict:
    """What metrics.jsonl says MLflow must hold (float64: every value as it is)."""
    return expected_scalars(metrics)


def _same(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        s == t and (a == b or (math.isnan(a) and math.isnan(b))) for (s, a), (t, b) in zip(got, want))


def _context(run_id: str, run_dir: str) -> SinkContext:
    """A SinkContext as a run gives it, with what these tests need: its other fields None (no
    configuration: a replay's), whatever fields the type has."""
    return SinkContext(**{**dict.fromkeys(SinkContext._fields), "run_id": run_id, "run_dir": run_dir, "attempt": 1})


def _replay(log: Path, tmp_path: Path, **options) -> tuple[list, MlflowClient, object]:
    """`log` replayed into metrics.jsonl and the registry's mlflow sink, on a thread of its own;
    the metrics, MLflow's client and the run it made."""
    info, sink = make_sink("mlflow", {"tracking_uri": _store(tmp_path), **options},
                           context=_context("replay-1", str(tmp_path)))
    assert not info.inline
    threaded = ThreadedSink(sink, "mlflow", capacity=10 ** 6, deadline=CloseDeadline(120))
    trainvisor.replay(log, year=2020, metrics=tmp_path / "m.jsonl", sinks=[threaded], keep_events=False)
    counts = threaded.counts()
    assert (counts.dropped, counts.failed, counts.abandoned) == (0, 0, False)
    metrics = [e for e in read_jsonl(tmp_path / "m.jsonl") if isinstance(e, trainvisor.Metric)]
    client, run = _only_run(_store(tmp_path), options.get("experiment", "trainvisor"))
    assert run.info.run_id == sink.mlflow_run_id
    return metrics, client, run


@pytest.mark.parametrize("framework, log, n, keys, first", [
    # bearpaw's Caffe run: 100 train iterations displayed, 21 tests of one net (the log's first:
    # "Test net output #0: accuracy = 0.0756" at iteration 0)
    ("caffe", "bearpaw-fork-mnist.log", 343, 5, ("test/accuracy", 0, 0.0756)),
    # Keras 2 verbose lines: iteration and epoch; train and val
    ("keras", "esartic-sound-cnn-30ep.log", 1200, 4, ("train/loss", 15726, 2.1921)),
    # detectron2: iterations; an evaluation's `box_proposals/AR@100` keyed with `_` for `@`
    ("detectron2", "bupt-d2-rpn-fpn-backbone-fpn.log", 2708, 14, ("train/total_loss", 199, 0.292)),
])
def test_every_metric_of_metrics_jsonl_is_in_mlflow_with_its_value_and_step(tmp_path, framework, log, n, keys,
                                                                          first):
    metrics, client, run = _replay(real_logs(framework) / log, tmp_path)
    assert len(metrics) == n
    got, want = _history(client, run), _expected(metrics)
    assert len(got) == keys and sorted(got) == sorted(want)
    for key in want:
        assert _same(got[key], want[key]), key
    key, step, value = first
    assert got[key][0] == (step, value)  # float64 end to end: the log's own decimal comes back
    assert run.info.status == "FINISHED"  # a replay sets no outcome: all its input was written
    assert run.info.run_name == "replay-1" and run.data.tags["trainvisor.run_id"] == "replay-1"
    assert run.data.params == {}  # a replay has no run configuration


def test_detectron2_evaluation_keys_keep_their_groups(tmp_path):
    _, client, run = _replay(real_logs("detectron2") / "bupt-d2-rpn-fpn-backbone-fpn.log", tmp_path,
                             experiment="d2", run_name="fpn", tags={"team": "vision", "owner@site": "ml"})
    got = _history(client, run)
    assert got["val/box_proposals/AR_100"][0][0] == 89999  # the final evaluation's iteration
    assert "val/box_proposals/ARs_1000" in got
    assert run.info.run_name == "fpn" and run.data.tags["team"] == "vision"
    assert run.data.tags["owner_site"] == "ml"  # `@` is not in a key MLflow takes: `_`, as in metric keys


def test_nan_losses_are_sent_and_come_back(tmp_path):
    # darknet's YOLOv3-tiny run diverged: 14340 of its 57000 values are NaN
    metrics, client, run = _replay(real_logs("darknet") / "darknet-yolov3-tiny-nan.log", tmp_path)
    bad = [m for m in metrics if not math.isfinite(m.value)]
    assert (len(metrics), len(bad)) == (57000, 14340)
    got, want = _history(client, run), _expected(metrics)
    assert sorted(got) == sorted(want)
    for key in want:
        assert _same(got[key], want[key]), key
    assert sum(math.isnan(v) for points in got.values() for _, v in points) == len(bad)


def _metric(name: str, value: float, iteration, *, rank=None, epoch=None, running=False) -> trainvisor.Metric:
    return trainvisor.Metric(name, value, iteration, "train", None, None, epoch, 1764000000.5, 1, rank=rank,
                             running=running)


def test_a_sink_fed_directly_keeps_infinities_ranks_and_running_values_apart(tmp_path):
    # No real log here prints an infinite value: these records are made, to show what MLflow keeps.
    _, sink = make_sink("mlflow", {"tracking_uri": _store(tmp_path), "experiment": "direct"})
    sink.write([_metric("loss", math.inf, 10, rank=0), _metric("loss", -math.inf, 10, rank=1),
                _metric("loss", 0.25, None, epoch=2.5), _metric("loss", 0.5, None, running=True),
                _metric("loss", 0.75, None, running=True)])
    sink.set_outcome(1, stopped=False)
    sink.close()
    client, run = _only_run(_store(tmp_path), "direct")
    assert _history(client, run) == {"rank0/train/loss": [(10, math.inf)], "rank1/train/loss": [(10, -math.inf)],
                                     "train/loss": [(2, 0.25)], "running/train/loss": [(0, 0.5), (1, 0.75)]}
    (point,) = client.get_metric_history(run.info.run_id, "train/loss")
    assert point.timestamp == 1764000000500  # the metric's wall time, in ms
    assert run.info.status == "FAILED"


def test_a_rank_seen_late_gets_its_own_section_beside_the_first_ranks_curve(tmp_path):
    # In a file store a key is a path: `train/loss/rank1` could not sit beside the file `train/loss`.
    from trainvisor.sinks.mlflow_sink import MlflowSink

    sink = MlflowSink(tracking_uri=_store(tmp_path), rank_wait=1)  # rank 0 alone settles its plain name
    sink.write([_metric("loss", 1.5, 10, rank=0)])
    sink.write([_metric("loss", 1.25, 20, rank=1), _metric("loss", 1.0, 20, rank=0)])
    sink.close()
    client, run = _only_run(_store(tmp_path))
    assert _history(client, run) == {"train/loss": [(10, 1.5), (20, 1.0)], "rank1/train/loss": [(20, 1.25)]}
    assert run.info.status == "FINISHED"


def _python_run(tmp_path: Path, command: tuple, **sinks_options) -> tuple:
    """`command` run by `Run` with the mlflow sink; the summary, MLflow's client and its run."""
    config = RunConfig(
        command=command, parsing=ParsingConfig(parser="caffe", year=2026), run=RunDirConfig(dir=str(tmp_path / "run")),
        process=ProcessConfig(env={"WANDB_API_KEY": "k-123"}),
        sinks=SinksConfig(use=("mlflow",), options={"mlflow": {"tracking_uri": _store(tmp_path), **sinks_options}}))
    with Run(config, stdout_fd=None, stderr_fd=None) as run:
        summary = run.run()
    return (summary, config, *_only_run(_store(tmp_path)))


def _flat(d: dict, prefix: str = "") -> dict:
    """The configuration's leaves by dotted name, as the test reads to_dict's nesting."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v if isinstance(v, str) else json.dumps(v)
    return out


def test_a_run_that_exits_0_is_finished_with_its_config_as_masked_params(tmp_path):
    summary, config, client, run = _python_run(
        tmp_path, (sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots"),
        tags={"source": "https://ci:hunter2@git.example/lenet"})
    assert summary.exit_code == 0 and run.info.status == "FINISHED"
    records = [e for e in read_jsonl(tmp_path / "run" / "metrics.jsonl") if isinstance(e, trainvisor.Metric)]
    assert len(records) == GENERATED_METRICS
    got, want = _history(client, run), _expected(records)
    assert sorted(got) == sorted(want) and all(_same(got[k], want[k]) for k in want)
    params = run.data.params
    assert params == _flat(to_dict(config, mask_secrets=True)) | {
        "sinks.options.mlflow.tags.source": "https://ci:***@git.example/lenet"}
    assert params["process.env.WANDB_API_KEY"] == "***" and params["sinks.use"] == '["mlflow"]'
    assert run.data.tags["source"] == "https://ci:***@git.example/lenet"
    assert run.data.tags["trainvisor.run_id"] == summary.run_id == run.info.run_name
    assert [c.failed for c in summary.sinks if c.name == "mlflow"] == [0]


def test_a_training_that_fails_is_failed_with_the_metrics_it_printed(tmp_path):
    summary, _, client, run = _python_run(
        tmp_path, (sys.executable, str(FAKE_CAFFE), "train", "--generate", "300", "--no-snapshots", "--exit-code", "3"))
    assert summary.exit_code == 3 and run.info.status == "FAILED" and run.info.end_time is not None
    records = [e for e in read_jsonl(tmp_path / "run" / "metrics.jsonl") if isinstance(e, trainvisor.Metric)]
    got, want = _history(client, run), _expected(records)
    assert len(want["train/loss"]) == 20 and sorted(got) == sorted(want)
    assert all(_same(got[k], want[k]) for k in want)


def test_a_run_restarted_on_its_directory_continues_its_mlflow_run(tmp_path):
    # The first attempt fails; the same `trainvisor run --run-dir` again is attempt 2 of the run.
    _, _, client, first = _python_run(
        tmp_path, (sys.executable, str(FAKE_CAFFE), "train", "--generate", "300", "--no-snapshots", "--exit-code", "3"))
    assert first.info.status == "FAILED" and first.data.tags["trainvisor.attempt"] == "1"
    summary, _, client, run = _python_run(
        tmp_path, (sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots"))
    assert summary.attempt == 2 and run.info.run_id == first.info.run_id  # _only_run: still one MLflow run
    assert run.info.status == "FINISHED" and run.data.tags["trainvisor.attempt"] == "2"
    records = [e for e in read_jsonl(tmp_path / "run" / "metrics.jsonl") if isinstance(e, trainvisor.Metric)]
    got, want = _history(client, run), _expected(records)  # both attempts' records, in order
    assert len(want["train/loss"]) == 20 + 20 and sorted(got) == sorted(want)
    assert all(_same(got[k], want[k]) for k in want)
    # MLflow keeps a param's first value: the first attempt's command
    assert json.loads(run.data.params["command"])[-3:] == ["--no-snapshots", "--exit-code", "3"]
    logged = "".join(p.read_text() for p in (tmp_path / "run").glob("*.log"))
    assert "params changed since the run's first attempt, kept as they were: command" in logged


def test_a_training_stopped_on_request_is_killed(tmp_path):
    config = RunConfig(
        command=(sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots", "--rate", "50"),
        parsing=ParsingConfig(parser="caffe", year=2026), run=RunDirConfig(dir=str(tmp_path / "run")),
        sinks=SinksConfig(use=("mlflow",), options={"mlflow": {"tracking_uri": _store(tmp_path)}}))
    with Run(config, stdout_fd=None, stderr_fd=None) as run:
        run.request_stop("enough")  # before the child starts: stopped as soon as it runs
        summary = run.run()
    assert summary.stop_reason == "enough"
    _, mlrun = _only_run(_store(tmp_path))
    assert mlrun.info.status == "KILLED"


def _cli(tmp_path: Path, *fake_caffe_args: str) -> tuple[list, dict]:
    """`trainvisor run --sink mlflow` over fake-caffe: its argv and environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINVISOR", "MLFLOW_"))}
    env.update(PYTHONPATH=str(ROOT), LC_ALL="C.UTF-8", TRAINVISOR_OFFLINE="1", MLFLOW_ALLOW_FILE_STORE="true")
    return [sys.executable, "-m", "trainvisor", "run", "--sink", "mlflow", "--year", "2026", "--parser", "caffe",
            "--run-dir", str(tmp_path / "run"), "--", sys.executable, str(FAKE_CAFFE), "train", "--generate", "600",
            "--no-snapshots", *fake_caffe_args], env


def test_a_run_that_fails_in_trainvisor_after_the_training_started_is_failed(tmp_path):
    config = RunConfig(
        command=(sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots"),
        parsing=ParsingConfig(parser="caffe", year=2026), run=RunDirConfig(dir=str(tmp_path / "run")),
        sinks=SinksConfig(use=("mlflow",), options={"mlflow": {"tracking_uri": _store(tmp_path)}}))
    with pytest.raises(ZeroDivisionError):
        with Run(config, stdout_fd=None, stderr_fd=None) as run:
            run.run_attempt()
            1 / 0  # trainvisor's caller fails before finish(): the run is closed on the way out
    _, mlrun = _only_run(_store(tmp_path))
    assert mlrun.info.status == "FAILED"


def test_a_run_that_fails_its_checks_before_the_training_makes_no_mlflow_run(tmp_path):
    config = RunConfig(
        command=(sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots"),
        run=RunDirConfig(dir=str(tmp_path / "run")),
        sinks=SinksConfig(use=("mlflow", "tensorboard"), options={"mlflow": {"tracking_uri": _store(tmp_path)}}))
    with pytest.raises(ConfigError, match="needs option `dir`"):  # the sink after mlflow is misconfigured
        Run(config, stdout_fd=None, stderr_fd=None).run()
    assert not (tmp_path / "mlruns").exists()


def test_trainvisor_run_with_sink_mlflow_writes_the_run_dir_store(tmp_path):
    argv, env = _cli(tmp_path)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    uri = "file:" + str(tmp_path / "run" / "mlruns")  # the default: the run directory's own store
    client, run = _only_run(uri)
    records = [e for e in read_jsonl(tmp_path / "run" / "metrics.jsonl") if isinstance(e, trainvisor.Metric)]
    assert len(records) == GENERATED_METRICS
    got, want = _history(client, run), _expected(records)
    assert sorted(got) == sorted(want) and all(_same(got[k], want[k]) for k in want)
    assert run.info.status == "FINISHED" and run.data.params["sinks.use"] == '["mlflow"]'
    logged = "".join(p.read_text() for p in (tmp_path / "run").glob("*.log"))
    assert f"mlflow sink: run {run.info.run_id} in experiment 'trainvisor' at {uri}" in logged


def test_trainvisor_terminated_mid_training_ends_the_mlflow_run_killed(tmp_path):
    argv, env = _cli(tmp_path, "--rate", "40")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        for number, _line in enumerate(proc.stderr, 1):  # the training's lines, as it prints them
            if number == 60:
                proc.send_signal(signal.SIGTERM)  # what a scheduler sends: forwarded to the training
                break
        proc.stderr.read()
        assert proc.wait(timeout=60) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    client, run = _only_run("file:" + str(tmp_path / "run" / "mlruns"))
    assert run.info.status == "KILLED"
    records = [e for e in read_jsonl(tmp_path / "run" / "metrics.jsonl") if isinstance(e, trainvisor.Metric)]
    assert 0 < len(records) < GENERATED_METRICS  # it was stopped mid-run
    got, want = _history(client, run), _expected(records)
    assert sorted(got) == sorted(want) and all(_same(got[k], want[k]) for k in want)


def test_a_store_that_cannot_be_written_is_counted_and_the_training_is_unaffected(tmp_path):
    (tmp_path / "mlruns").write_text("a file where the store's directory should be\n")
    config = RunConfig(
        command=(sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots"),
        parsing=ParsingConfig(parser="caffe", year=2026), run=RunDirConfig(dir=str(tmp_path / "run")),
        sinks=SinksConfig(use=("mlflow",), options={"mlflow": {"tracking_uri": _store(tmp_path)}}))
    with Run(config, stdout_fd=None, stderr_fd=None) as run:
        summary = run.run()
    assert summary.exit_code == 0 and summary.metrics == GENERATED_METRICS
    records = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    (counts,) = [c for c in summary.sinks if c.name == "mlflow"]
    assert counts.failed > 0 and counts.written + counts.failed + counts.dropped == len(records)
    (jsonl,) = [c for c in summary.sinks if c.name == "jsonl"]
    assert (jsonl.written, jsonl.failed) == (len(records), 0)
    logged = "".join(p.read_text() for p in (tmp_path / "run").glob("*.log"))
    assert "sink mlflow failed" in logged


def test_making_the_sink_imports_no_mlflow(tmp_path):
    code = ("import sys\nfrom trainvisor.sinks.registry import make_sink\n"
            f"info, sink = make_sink('mlflow', {{'tracking_uri': {_store(tmp_path)!r}}})\n"
            "print(sink.tracking_uri, sorted(m for m in sys.modules if m.split('.')[0] == 'mlflow'))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{_store(tmp_path)} []\n"


def test_the_local_store_without_mlflows_opt_in_is_one_line_before_the_training(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    with pytest.raises(ConfigError) as err:
        make_sink("mlflow", {}, context=_context("r1", str(tmp_path)))
    message = str(err.value)
    assert message.startswith("sink 'mlflow': MLflow writes its local store")  # said once, not wrapped
    assert "\n" not in message and "MLFLOW_ALLOW_FILE_STORE=true" in message
    assert f"file:{tmp_path}/mlruns" in message  # the default: RUN_DIR/mlruns


def test_a_bad_option_names_the_sink_and_masks_the_uri_password():
    with pytest.raises(ConfigError) as err:
        make_sink("mlflow", {"tracking_uri": "https://ml:s3cret@mlflow.example", "experimnt": "x"})
    message = str(err.value)
    assert "sink 'mlflow'" in message and "experimnt" in message
    assert "s3cret" not in message and "https://ml:***@mlflow.example" in message


def test_the_environment_names_the_server_and_the_experiment(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://mlflow.example")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "lenet")
    _, sink = make_sink("mlflow", {}, context=_context("r1", str(tmp_path)))
    assert (sink.tracking_uri, sink.experiment, sink.run_name) == ("https://mlflow.example", "lenet", "r1")
    _, sink = make_sink("mlflow", {"tracking_uri": _store(tmp_path), "experiment": "mine"})
    assert (sink.tracking_uri, sink.experiment) == (_store(tmp_path), "mine")
