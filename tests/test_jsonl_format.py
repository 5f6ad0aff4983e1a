"""The JSONL sink's C formatter against its Python formatter: integers, and a run's constant fields."""
from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings, strategies as st

from trainvisor.events import Metric
from trainvisor.sinks import jsonl

from .test_caffe_speedups import CHECKPOINTS, METRICS

pytestmark = pytest.mark.skipif(jsonl._c_format is None, reason="the C formatter is not built (no compiler)")


@pytest.mark.parametrize("number", [0, 7, -1, 10**18, -(2**63), 2**63 - 1, 2**63, -(2**63) - 1])
def test_integers_at_the_ends_of_long_long(number):
    """Integers are written by C digit by digit up to the ends of long long, by Python past them."""
    events = [Metric("loss", 0.5, number, "train", number, None, None, 1.5, 3)]
    expected = jsonl._format_event(events[0])  # also makes the names known to the C path
    assert jsonl._c_format(events, Metric, jsonl._NAMES, jsonl._format_event) == expected
    assert json.loads(expected)["iteration"] == number


def jsonl_text(events, extra: dict, use_c: bool) -> str:
    saved = jsonl._FAST
    out = io.StringIO()
    try:
        jsonl._FAST = use_c
        sink = jsonl.JsonlSink(out, extra=extra)
        sink.write(events)
        sink.close()
    finally:
        jsonl._FAST = saved
    return out.getvalue()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(METRICS, CHECKPOINTS), max_size=20), st.integers(min_value=1, max_value=10**6))
def test_run_fields_are_the_python_ones(events, attempt):
    """A run's constant fields (its attempt) go before each record's closing brace in C, as the
    pure-Python sink puts them there with one replace over the batch."""
    text = jsonl_text(events, {"attempt": attempt}, use_c=True)
    assert text == jsonl_text(events, {"attempt": attempt}, use_c=False)
    assert text == "".join(map(jsonl._format_event, events)).replace("}\n", f', "attempt": {attempt}}}\n')
    assert [json.loads(line)["attempt"] for line in text.splitlines()] == [attempt] * len(events)
