"""TensorFlow Estimator / TPUEstimator logs: the final-step loss, evaluation dicts and the
records absl prints a second time, on a project-written log (fixtures/logs/tensorflow-tpu-absl.log)."""
from __future__ import annotations

import re

import pytest

from trainvisor.events import Metric
from trainvisor.stream.lines import LineSplitter
from trainvisor.parsers import ParserOptions, create_parser, get_parser_info

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


SIGNED = [
    "INFO:tensorflow:Using config: {'_model_dir': '/tmp/m', '_tf_random_seed': None}",
    "I0513 23:26:40.912345 139977807611712 estimator.py:212] Using config: {'_model_dir': '/tmp/m'}",
    "INFO:tensorflow:Calling model_fn.", "INFO:tensorflow:Done calling model_fn.",
    "I0513 23:26:41.000001 139977807611712 estimator.py:1150] Done calling model_fn.",
    "INFO:tensorflow:Create CheckpointSaverHook.", "INFO:tensorflow:Graph was finalized.",
    "INFO:tensorflow:Starting evaluation at 2026-05-13T23:28:43Z",
    "INFO:tensorflow:***** Running training *****", "INFO:tensorflow:***** Eval results *****",
    "I0513 23:26:40.912345 139977807611712 run_classifier.py:870] ***** Running training *****",
    "INFO:tensorflow:loss = 0.5, step = 100", "I0513 23:26:41.000001 1 basic_session_run_hooks.py:262] loss = 0.5, step = 1",
]
NOT_SIGNED = [
    "***** Running training *****",  # the Hugging Face Trainer's
    "[2026-05-13 23:26:40] ***** Running training *****",  # a bracketed time is no absl prefix
    "Calling model_fn.", "WARNING:tensorflow:Calling model_fn.", "INFO:tensorflow:Using config: default",
    "W0513 23:26:40.912345 139977807611712 deprecation.py:323] From /x/y.py:1: a is deprecated.",
    "I0513 23:26:40.912345 139977807611712 run_classifier.cc:870] ***** Running training *****",  # absl is Python's
    "INFO:tensorflow:*** Features ***", "INFO:tensorflow:Reduce to /job:localhost/replica:0 then broadcast to (...).",
]


@pytest.mark.parametrize("line", SIGNED)
def test_the_estimators_lines_sign_tensorflow_in_both_forms(line):
    assert re.search(get_parser_info("tensorflow").signature, line + "\n", re.M)


@pytest.mark.parametrize("line", NOT_SIGNED)
def test_lines_without_tensorflows_prefix_or_phrases_sign_nothing(line):
    assert not re.search(get_parser_info("tensorflow").signature, line + "\n", re.M)


def test_auto_keeps_tensorflow_when_berts_banner_comes_before_screens_of_warnings():
    """The banner was Hugging Face's first, and the 500 lines that could overturn that choice
    were all warnings: auto reported nothing from the records after them."""
    warning = ("WARNING:tensorflow:From /x/ops/math_ops.py:3066: to_float (from tensorflow.python.ops.math_ops) is "
               "deprecated and will be removed in a future version.\nInstructions for updating:\nUse `tf.cast` instead.\n")
    text = ("INFO:tensorflow:***** Running training *****\n" + warning * 200
            + "INFO:tensorflow:loss = 0.5, step = 1\nINFO:tensorflow:Loss for final step: 0.25.\n")
    p = create_parser("auto", ParserOptions(year=2026))
    events = p.feed(LineSplitter("log").feed(text.encode(), 0.0, 0.0)) + p.finish()
    assert p.chosen == "tensorflow" and not p.switched
    assert [(e.name, e.value, e.iteration, e.line) for e in events] == [("loss", 0.5, 1, 602), ("loss", 0.25, 1, 603)]
