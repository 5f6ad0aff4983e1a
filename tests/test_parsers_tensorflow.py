"""TensorFlow Estimator / TPUEstimator logs: the final-step loss, evaluation dicts and the
records absl prints a second time, on a project-written log (fixtures/logs/tensorflow-tpu-absl.log)."""
from __future__ import annotations

import pytest

from trainvisor.events import Metric

from .parsing_helpers import FIXTURES, chunked_events, parse_file, parse_text

LOG = FIXTURES / "tensorflow-tpu-absl.log"


def rows(events):
    return [(e.name, e.value, e.iteration, e.phase, e.line) if type(e) is Metric else (e.path, e.iteration, e.line)
            for e in events]


@pytest.mark.parametrize("parser", ["tensorflow", "auto"])
def test_tpu_estimator_log_each_record_once(parser):
    p, ev = parse_file(LOG, parser)
    assert getattr(p, "chosen", "tensorflow") == "tensorflow"
    assert rows(ev) == [
        ("gs://bucket/out/model.ckpt-0", 0, 3),  # line 4 is absl's copy
        ("global_step/sec", 2.5, None, "train", 5),  # line 6 is absl's copy
        ("global_step/sec", 2.5, None, "train", 9),  # the same rate again: a new record, in the same form
        ("gs://bucket/out/model.ckpt-1000", 1000, 11),
        # absl's line comes first here (13), the INFO:tensorflow copy (14) is dropped;
        # step: the checkpoint before it
        ("loss", 0.0025181356, 1000, "train", 13),
        # line 17; line 18 is absl's copy, and the "***** Eval results *****" block repeats the same evaluation
        ("accuracy", 0.8500477, 1000, "val", 17),
        ("loss", 0.7216634, 1000, "val", 17),
    ]


def test_final_step_loss_takes_the_latest_step_named():
    text = ("INFO:tensorflow:loss = 0.5, step = 100\n"
            "INFO:tensorflow:Saving dict for global step 150: accuracy = 0.9, global_step = 150, loss = 0.4\n"
            "INFO:tensorflow:Loss for final step: nan.\n")
    got = [(e.name, e.iteration, e.phase) for e in parse_text(text, "tensorflow") if type(e) is Metric]
    assert got == [("loss", 100, "train"), ("accuracy", 150, "val"), ("loss", 150, "val"), ("loss", 150, "train")]
    assert str(parse_text(text, "tensorflow")[-1].value) == "nan"


def test_final_step_loss_before_any_step_has_none():
    ev = parse_text("INFO:tensorflow:Loss for final step: 0.25.\n", "tensorflow")
    assert [(e.name, e.value, e.iteration) for e in ev] == [("loss", 0.25, None)]


def test_absl_copies_are_dropped_only_across_forms():
    text = ("INFO:tensorflow:loss = 0.5, step = 100\n"
            "I0102 10:11:12.131415 140001234567890 basic_session_run_hooks.py:262] loss = 0.5, step = 100\n"
            "INFO:tensorflow:loss = 0.5, step = 100\n")  # a third print is no copy of the second handler
    assert [e.line for e in parse_text(text, "tensorflow")] == [1, 3]


@pytest.mark.parametrize("parser", ["tensorflow", "auto"])
@pytest.mark.parametrize("chunk", [1, 5, 4096])
def test_live_equals_replay(parser, chunk):
    line_by_line = chunked_events(LOG, parser, 0)
    assert len(line_by_line) == 7 and sum(not isinstance(e, Metric) for e in line_by_line) == 2
    assert chunked_events(LOG, parser, chunk) == line_by_line
