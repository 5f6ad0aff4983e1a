"""JSON-lines records as other tools write them: numbers as strings are numbers, and
time keys are the record's time, never metrics (fixtures/logs/katib-json.log)."""
from __future__ import annotations

import math

from trainvisor.events import Metric

from .parsing_helpers import FIXTURES, parse_file, parse_text


def rows(events):
    return [(m.name, "nan" if math.isnan(m.value) else m.value, m.iteration, m.phase, m.epoch, m.line)
            for m in events if type(m) is Metric]


def test_numeric_strings_are_numbers_and_time_keys_are_not_metrics():
    _, events = parse_file(FIXTURES / "katib-json.log", "generic")
    assert rows(events) == [
        ("loss", 0.22, 0, "train", None, 1),
        ("loss", 0.18, 10, "train", None, 2),
        ("accuracy", 0.91, 10, "train", None, 2),
        ("loss", 0.001, 20, "train", None, 3),  # " 1e-3 ": blanks around a number are fine
        ("lr", "nan", 20, "train", None, 3),  # a NaN written as a string stays a NaN metric
        ("loss", 0.3, None, "val", 1.0, 4),  # "mode": "val" still sets the phase
        ("loss", 0.15, 30, "train", None, 5),
    ]


def test_auto_on_the_json_fixture_gives_the_generic_records():
    parser, events = parse_file(FIXTURES / "katib-json.log", "auto")
    assert parser.chosen == "generic" and len(rows(events)) == 7


def test_strings_that_are_not_numbers_give_no_metric():
    text = '{"step": "5", "version": "1.2.3", "tag": "#7", "name": "run", "loss": "abc", "acc": "0.5"}\n'
    assert rows(parse_text(text, "generic")) == [("acc", 0.5, 5, "train", None, 1)]
