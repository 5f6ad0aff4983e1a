"""A run's node and process rank (config keys here, over no launcher variable: the tests clear
them) on what it says of itself: every metrics.jsonl record, `Run.status()`, the summary, and
every Prometheus series, scraped over HTTP, and each webhook body; a user label may not take
their names. Kept apart from `rank`, the launcher's prefix of a line."""
from __future__ import annotations

import json
import re
import sys
import urllib.request

import pytest

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from trainvisor import Run, RunConfig  # noqa: E402
from trainvisor.config import ParsingConfig, RunDirConfig, SinksConfig  # noqa: E402
from trainvisor.errors import ConfigError  # noqa: E402
from trainvisor.sinks.registry import make_sink  # noqa: E402

from .conftest import FAKE_CAFFE  # noqa: E402
from .test_sink_webhook import receiver  # noqa: E402,F401 - the webhook tests' receiver, a fixture


def test_node_and_process_rank_label_records_status_summary_and_every_series(tmp_path):
    config = RunConfig(
        command=(sys.executable, str(FAKE_CAFFE), "train", "--generate", "90", "--no-snapshots"),
        parsing=ParsingConfig(parser="caffe", year=2026),
        run=RunDirConfig(dir=str(tmp_path / "run"), node=3, process_rank=12),
        sinks=SinksConfig(use=("prometheus",), options={"prometheus": {"port": 0}}))
    with Run(config, stdout_fd=None, stderr_fd=None) as run:
        run.run_attempt()
        log = "".join(p.read_text() for p in (tmp_path / "run").glob("*.log"))
        port = int(re.findall(r"prometheus sink: serving http://127\.0\.0\.1:(\d+)/metrics", log)[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            families = list(text_string_to_metric_families(resp.read().decode()))
        status = run.status()
        summary = run.finish()
    assert f"run {run.run_id}: node 3, process rank 12 (node from run.node)" in log
    samples = [s for fam in families for s in fam.samples]
    assert samples and all((s.labels["node"], s.labels["process_rank"]) == ("3", "12") for s in samples)
    assert {s.labels["rank"] for s in samples if s.name == "trainvisor_metric"} == {""}  # no line had a prefix
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == summary.events and {(r["node"], r["process_rank"]) for r in records} == {(3, 12)}
    assert (status.node, status.process_rank) == (3, 12)
    assert (summary.node, summary.process_rank) == (3, 12)


@pytest.mark.parametrize("name", ["node", "process_rank"])
def test_a_user_label_may_not_take_the_identity_s_names(name):
    with pytest.raises(ConfigError) as err:
        make_sink("prometheus", {"labels": {name: "x"}})
    assert name in str(err.value) and "reserved" in str(err.value) and "\n" not in str(err.value)


def test_each_webhook_body_says_the_node_beside_the_run_id(receiver, tmp_path):
    from trainvisor.events import Metric
    from trainvisor.sinks.context import SinkContext

    context = SinkContext(run_id="multi", run_dir=str(tmp_path), identity={"node": 1, "process_rank": 9})
    _, sink = make_sink("webhook", {"url": receiver.url, "batch_seconds": 0, "environ": {}}, context)
    metric = Metric("loss", 0.5, 10, "train", None, None, None, 0.0, 1)
    sink.write([metric])
    sink.close()
    assert receiver.items("metrics") == [metric.to_json_dict()]
    assert receiver.bodies and {(b["run_id"], b["node"], b["process_rank"]) for b in receiver.bodies} == {("multi", 1, 9)}
