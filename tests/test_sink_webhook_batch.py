"""The webhook's pure part (sinks/webhook_batch.py), without HTTP: request bodies packed from a
real Caffe log's records within any `max_bytes`, none cut; a Trainer log's fractional epochs
grouped into the epoch in progress, as the log's own dict lines say. (The bodies and statistics
as a receiver gets them: test_sink_webhook.py.)"""
from __future__ import annotations

import ast
import functools
import json
import math
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

import trainvisor
from trainvisor.events import Metric
from trainvisor.sinks.webhook_batch import KINDS, EpochStatistics, encode, pack

from .conftest import real_logs


@functools.lru_cache(maxsize=None)
def _events(framework: str, log: str) -> tuple:
    """A real log's records, replayed once per session (its wall times then agree between uses)."""
    return trainvisor.replay(real_logs(framework) / log).events


def _statistics(events: tuple) -> list[dict]:
    stats = EpochStatistics()
    out = [s for e in events if type(e) is Metric for s in stats.add(e)]
    return out + stats.finish()


@settings(max_examples=40, deadline=None)
@given(max_bytes=st.integers(min_value=400, max_value=20_000), run_id=st.sampled_from(["", "run-ä/7"]))
def test_packing_takes_a_prefix_within_max_bytes_and_cuts_no_record(max_bytes, run_id):
    items = deque(_bearpaw_items())
    sent: dict = {k: [] for k in KINDS}
    batch = 1
    while items:
        body, taken = pack(items, batch=batch, max_bytes=max_bytes, run_id=run_id)
        assert len(body) <= max_bytes and sum(taken.values()) >= 1
        doc = json.loads(body)
        assert doc["batch"] == batch and doc.get("run_id", "") == run_id
        for _ in range(sum(taken.values())):
            item = items.popleft()
            sent[item.kind].append(json.loads(item.data))
        for k in KINDS:
            assert doc[k] == sent[k][len(sent[k]) - taken[k]:]  # what was taken, whole, in order
        batch += 1
    assert sent["metrics"] == [e.to_json_dict() for e in _events("caffe", "bearpaw-fork-mnist.log") if type(e) is Metric]


def _bearpaw_items() -> list:
    """The Caffe log's records and statistics as the sink holds them, in its order."""
    stats = EpochStatistics()
    out = []
    for e in _events("caffe", "bearpaw-fork-mnist.log"):
        if type(e) is Metric:
            out += [encode("statistics", s) for s in stats.add(e)]
            out.append(encode("metrics", e.to_json_dict()))
        else:
            out.append(encode("events", e.to_json_dict()))
    return out + [encode("statistics", s) for s in stats.finish()]


def test_trainer_fractional_epochs_count_towards_the_epoch_in_progress():
    stats = _statistics(_events("huggingface", "eshaubale-hf-trainer-padded.log"))
    want: list = []  # (epoch, last train loss, eval loss) per run of dict lines in one epoch
    for line in (real_logs("huggingface") / "eshaubale-hf-trainer-padded.log").read_text().splitlines():
        if not line.startswith("{'") or "'epoch'" not in line:
            continue
        d = ast.literal_eval(line.strip())
        epoch = math.ceil(d["epoch"])  # 0.22 ... 0.86 and the evaluation at 1.0: the first epoch
        if not want or want[-1][0] != epoch:
            want.append([epoch, None, None])
        want[-1][1] = d.get("loss", want[-1][1])
        want[-1][2] = d.get("eval_loss", want[-1][2])
    got = [[s["epoch"], s["stages"].get("train", {}).get("loss"), s["stages"].get("validation", {}).get("loss")]
           for s in stats]
    assert got == want and [w[0] for w in want[:4]] == [1, 2, 3, 1]  # two trainings in the log
