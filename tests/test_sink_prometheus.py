"""The Prometheus sink: /metrics scraped over HTTP and read with prometheus_client's own text
parser, while a paced fake training runs under `trainvisor run` and at the end of a run driven
from Python; the values equal the run's own metrics.jsonl records (the last per series, over the
prefix the scrape's counter says it had seen); a sink fed events directly for exact checks; a
port in use is one line; close stops the server."""
from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from trainvisor import Run, RunConfig  # noqa: E402
from trainvisor.config import ParsingConfig, RunDirConfig, SinksConfig  # noqa: E402
from trainvisor.errors import ConfigError  # noqa: E402
from trainvisor.events import CheckpointEvent, Metric, Notice  # noqa: E402
from trainvisor.sinks.registry import get_sink_info, make_sink  # noqa: E402

from .conftest import FAKE_CAFFE, ROOT  # noqa: E402

GENERATED_METRICS = 91  # fake-caffe's generated 600-iteration log: the metrics the run's JSONL holds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict:
    """{family name: {frozen labels: value}} as prometheus_client's parser reads /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _expected(records: list[dict], run_id: str = "", **extra: str) -> dict:
    """The last value per (metric, phase, test net, rank) of `records`, keyed as `_scrape` keys them."""
    out = {}
    for r in records:
        labels = {"run_id": run_id, **extra, "metric": r["name"], "phase": r["phase"],
                  "test_net": "" if r["test_net"] is None else str(r["test_net"]),
                  "rank": "" if r.get("rank") is None else str(r["rank"])}
        out[tuple(sorted(labels.items()))] = float(r["value"])
    return out


def _records(path: Path) -> list[dict]:
    """Every record of a run's metrics.jsonl, in order: metrics and checkpoint announcements."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def _assert_prefix_agrees(scraped: dict, records: list[dict], **labels: str) -> int:
    """The scrape's counters say how many metrics and checkpoint announcements it had seen; the
    sink sees records in the order the JSONL holds them, so it had seen exactly that many first
    records, and its gauges equal their last values. Returns the number of metrics seen."""
    (metrics,) = scraped["trainvisor_metrics_total"].values()
    (announced,) = scraped["trainvisor_checkpoint_announcements_total"].values()
    prefix = records[:int(metrics) + int(announced)]
    seen = [r for r in prefix if "event" not in r]
    assert len(seen) == metrics
    assert scraped.get("trainvisor_metric", {}) == _expected(seen, **labels)
    iterations = [float(r["iteration"]) for r in prefix if r["iteration"] is not None]
    assert list(scraped.get("trainvisor_iteration", {}).values()) == iterations[-1:]
    return len(seen)


def test_metrics_scraped_while_a_paced_training_runs_equal_the_jsonl_prefix(tmp_path):
    port = _free_port()
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"sinks:\n  options:\n    prometheus: {{port: {port}, run_id: cli-run, labels: {{team: vision}}}}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINVISOR")}
    env.update(PYTHONPATH=str(ROOT), LC_ALL="C.UTF-8", TRAINVISOR_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "trainvisor", "run", "--config", str(cfg), "--sink", "prometheus",
                             "--year", "2026", "--parser", "caffe", "--run-dir", str(tmp_path / "run"), "--",
                             sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots",
                             "--rate", "30"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tmp_path)
    scrapes = []
    try:
        # The child's lines come through trainvisor's stderr as they are printed: each is a moment
        # of the running training at which to scrape, until a scrape has seen some metrics.
        for number, _line in enumerate(proc.stderr, 1):
            if number >= 40 and len(scrapes) < 2 and (not scrapes or number >= 80):
                scraped = _scrape(port)
                if list(scraped["trainvisor_metrics_total"].values()) != [0.0]:
                    scrapes.append(scraped)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    records = _records(tmp_path / "run" / "metrics.jsonl")
    assert sum("event" not in r for r in records) == GENERATED_METRICS
    seen = [_assert_prefix_agrees(s, records, run_id="cli-run", team="vision") for s in scrapes]
    assert len(seen) == 2 and 0 < seen[0] <= seen[1] < GENERATED_METRICS  # both taken mid-run
    base = (("run_id", "cli-run"), ("team", "vision"))
    for s in scrapes:  # the run's status, mid-run: the child running, attempt 1, lines growing
        assert s["trainvisor_child_state"] == {tuple(sorted(base + (("state", st),))): float(st == "running")
                                               for st in ("not-started", "running", "stopping", "exited")}
        assert s["trainvisor_attempt"] == {base: 1.0}
        assert "trainvisor_child_exit_code" not in s
        assert s["trainvisor_parse_faults_total"] == {base: 0.0}
        # Every record a scrape counted came from a line the pipeline had read by then.
        assert s["trainvisor_records_total"][base] >= s["trainvisor_metrics_total"][base]
        assert 0 < s["trainvisor_seconds_since_metric"][base] < 60
    assert scrapes[0]["trainvisor_lines_total"][base] <= scrapes[1]["trainvisor_lines_total"][base]
    with pytest.raises(urllib.error.URLError):  # the run's end closed the server
        _scrape(port)


def test_a_scrape_at_the_end_of_a_python_run_has_every_last_value_and_close_stops_it(tmp_path):
    config = RunConfig(
        command=(sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots"),
        parsing=ParsingConfig(parser="caffe", year=2026), run=RunDirConfig(dir=str(tmp_path / "run")),
        sinks=SinksConfig(use=("prometheus",), options={"prometheus": {"port": 0, "labels": {"host_group": "a"}}}))
    with Run(config, stdout_fd=None, stderr_fd=None) as run:
        run.run_attempt()
        # Port 0: a free port, which the run log names (how a user finds it).
        logged = re.findall(r"prometheus sink: serving http://127\.0\.0\.1:(\d+)/metrics",
                            "".join(p.read_text() for p in (tmp_path / "run").glob("*.log")))
        assert len(logged) == 1
        port = int(logged[0])
        scraped = _scrape(port)
        summary = run.finish()
    records = _records(tmp_path / "run" / "metrics.jsonl")
    # The run's own id labels every series (the sink's context gives it; no option named one).
    assert _assert_prefix_agrees(scraped, records, run_id=run.run_id, host_group="a") == GENERATED_METRICS
    base = (("host_group", "a"), ("run_id", run.run_id))
    # Scraped after the child ended, before finish(): its state, exit code and the run's counts.
    assert scraped["trainvisor_child_state"][tuple(sorted(base + (("state", "exited"),)))] == 1.0
    assert scraped["trainvisor_child_state"][tuple(sorted(base + (("state", "running"),)))] == 0.0
    assert scraped["trainvisor_child_exit_code"] == {base: 0.0}
    assert scraped["trainvisor_lines_total"] == {base: float(summary.lines)}
    assert scraped["trainvisor_records_total"] == {base: float(summary.events)}
    assert scraped["trainvisor_checkpoints_complete_total"] == {base: 0.0}
    assert scraped["trainvisor_uploads_verified_total"] == {base: 0.0}
    assert list(scraped["trainvisor_iteration"].values()) == [600.0]
    announced = sum(r.get("event") == "checkpoint" for r in records)
    assert announced == 20  # fake-caffe's log announces its snapshots even when it writes none
    assert list(scraped["trainvisor_checkpoint_announcements_total"].values()) == [float(announced)]
    assert [c.written for c in summary.sinks if c.name == "prometheus"] == [len(records)]  # inline: none dropped
    with pytest.raises(urllib.error.URLError):
        _scrape(port)


def _metric(name: str, value: float, iteration: int, phase: str = "train", *, test_net=None, rank=None,
            epoch=None) -> Metric:
    return Metric(name, value, iteration, phase, test_net, None, epoch, 0.0, 1, rank=rank)


def test_a_sink_fed_directly_exports_last_values_per_series_nan_included():
    _, sink = make_sink("prometheus", {"run_id": "r1", "labels": {"job": "lenet"}})
    try:
        assert get_sink_info("prometheus").inline
        sink.write([_metric("loss", 2.5, 0), _metric("loss", 1.25, 10, epoch=0.5),
                    _metric("accuracy", 0.5, 10, "test", test_net=0), _metric("accuracy", 0.75, 10, "test", test_net=1),
                    _metric("loss/total", float("nan"), 12, rank=1),
                    CheckpointEvent("snap/iter_12.caffemodel", "weights", 12, None, 5, 0.0),
                    Notice("some-code", "said once", 6, 0.0)])
        got = _scrape(sink.port)
    finally:
        sink.close()
    series = {dict(k)["metric"] + "|" + dict(k)["phase"] + "|" + dict(k)["test_net"] + "|" + dict(k)["rank"]: v
              for k, v in got["trainvisor_metric"].items()}
    assert math.isnan(series.pop("loss/total|train||1"))
    assert series == {"loss|train||": 1.25, "accuracy|test|0|": 0.5, "accuracy|test|1|": 0.75}
    assert all(dict(k)["run_id"] == "r1" and dict(k)["job"] == "lenet" for k in got["trainvisor_metric"])
    assert {dict(k)["rank"]: v for k, v in got["trainvisor_iteration"].items()} == {"": 12.0, "1": 12.0}
    assert {dict(k)["rank"]: v for k, v in got["trainvisor_epoch"].items()} == {"": 0.5}
    assert list(got["trainvisor_metrics_total"].values()) == [5.0]
    assert list(got["trainvisor_checkpoint_announcements_total"].values()) == [1.0]


def test_a_port_in_use_is_one_line_config_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as err:
            make_sink("prometheus", {"port": port})
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"sink 'prometheus': port {port} on 127.0.0.1 is in use")


@pytest.mark.parametrize("options, says", [
    ({"labels": {"1bad": "x"}}, "label '1bad' is not a Prometheus label name"),
    ({"labels": {"phase": "x"}}, "label 'phase' is set by the sink itself"),
    ({"port": "9100"}, "port must be an integer 0..65535"),
])
def test_bad_options_are_one_line_config_errors(options, says):
    with pytest.raises(ConfigError) as err:
        make_sink("prometheus", options)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_close_stops_the_server_and_its_thread():
    _, sink = make_sink("prometheus", {})
    port = sink.port
    assert port > 0 and _scrape(port)["trainvisor_metrics_total"]
    sink.close()
    sink.close()  # a second close is harmless (the run closes what it made on every path)
    with pytest.raises(urllib.error.URLError):
        _scrape(port)
    assert not sink._thread.is_alive()


def test_trainvisor_run_on_a_port_in_use_says_one_line_and_the_child_never_starts(tmp_path):
    marker = tmp_path / "started"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINVISOR")}
    env.update(PYTHONPATH=str(ROOT), LC_ALL="C.UTF-8", TRAINVISOR_OFFLINE="1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "run.yaml").write_text(f"sinks: {{use: [prometheus], options: {{prometheus: {{port: {port}}}}}}}\n")
        proc = subprocess.run([sys.executable, "-m", "trainvisor", "run", "--config", str(tmp_path / "run.yaml"),
                               "--run-dir", str(tmp_path / "run"), "--", sys.executable, "-c",
                               f"open({str(marker)!r}, 'w')"],
                              capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    # The sink named once (the factory's own "prometheus sink:" prefix is not repeated).
    assert line == (f"trainvisor: sink 'prometheus': port {port} on 127.0.0.1 is in use; choose another "
                    "sinks.options.prometheus.port, or 0 for a free one")
    assert not marker.exists()


def test_without_prometheus_client_the_sink_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # what `import` meets when it is not installed
    with pytest.raises(ConfigError) as err:
        make_sink("prometheus", {})
    assert str(err.value) == "sink 'prometheus': needs the prometheus_client package (pip install prometheus_client)"


@pytest.mark.parametrize("fmt", ["caffe", "keras", "detectron2", "huggingface", "lightning", "mxnet"])
def test_the_c_loop_keeps_exactly_what_the_python_loop_keeps_on_real_logs(fmt):
    """Every real log of a format, replayed (all ranks where prefixed; its checkpoints too): the
    C loop's latest values, per-rank iterations and epochs and counts equal the reference's."""
    from trainvisor.sinks import prometheus as prom

    from .parsing_helpers import REAL_LOGS, parse_file

    if prom._c_latest is None:
        pytest.skip("the sinks' C extension is not built here")
    logs = sorted((REAL_LOGS / fmt).glob("*.log"))
    assert logs, f"no {fmt} logs in {REAL_LOGS / fmt}"
    with_values = 0
    for log in logs:
        _, events = parse_file(log, "auto")
        events = list(events)
        c_state, py_state = ({}, {}, {}), ({}, {}, {})
        for i in range(0, len(events), 97):  # batches as the pipeline gives them, cut anywhere
            batch = events[i:i + 97]
            c_counts = prom._c_latest(batch, Metric, CheckpointEvent, prom._POSITIONS, *c_state)
            assert c_counts == prom._write_python(batch, *py_state), log.name
        assert c_state == py_state, log.name
        for mine, theirs in zip(c_state, py_state):  # the same objects' values, NaN included
            assert all(mine[k] is theirs[k] for k in theirs), log.name
        with_values += bool(c_state[0])
    assert with_values >= len(logs) - 1  # a log of a crash before the first metric may have none
    # a position past the record's end (a layout the caller got wrong) skips it, never reads past it
    latest: dict = {}
    assert prom._c_latest([_metric("loss", 1.0, 10)], Metric, CheckpointEvent,
                          prom._POSITIONS[:-1] + (len(Metric._fields),), latest, {}, {}) == (0, 0)
    assert latest == {}
