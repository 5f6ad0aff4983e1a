"""The optional C loop of the Caffe parser gives exactly the Python loop's events."""
from __future__ import annotations

import json

import math
import re

import pytest
from hypothesis import given, settings, strategies as st

from trainvisor.parsers import ParserOptions
from trainvisor.parsers import caffe

from .conftest import FIXTURES, REAL_LOGS
from .parsing_helpers import chunks, feed_pieces

pytestmark = pytest.mark.skipif(caffe._c_parse_block is None, reason="C speedup not built (no compiler at install)")


def events_both_ways(data: bytes, *, chunk: int = 65536, ipe=None):
    results = []
    for use_c in (True, False):
        parser = caffe.CaffeParser(ParserOptions(year=2026, iters_per_epoch=ipe))
        if not use_c:
            parser._c_loop = None
        results.append(feed_pieces(parser, chunks(data, chunk), stream="s", wall_time=1.5, finish=False))
    return results


def same(a, b) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if type(x) is not type(y):
            return False
        for u, v in zip(x.__dict__.values() if hasattr(x, "__dict__") else x,
                        y.__dict__.values() if hasattr(y, "__dict__") else y):
            if isinstance(u, float) and isinstance(v, float) and math.isnan(u) and math.isnan(v):
                continue
            if u != v or type(u) is not type(v):
                return False
    return True


LOGS = [FIXTURES / "logs" / "lenet-newyear.log"] + (sorted((REAL_LOGS / "caffe").glob("*.log")) if (REAL_LOGS / "caffe").is_dir() else [])


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_c_and_python_loops_agree_on_every_log(log):
    c_events, py_events = events_both_ways(log.read_bytes(), ipe=100)
    assert py_events or "libcudart" in log.name, "a training log yields events"
    assert same(c_events, py_events)


PIECES = [
    "I0827 10:27:16.124927 28582 solver.cpp:250] ", "W1231 23:59:59.999999 1 x.cpp:1]  ", "I0101 00:00:00.00000a 1 a] ",
    "Iteration 12", " (3.5 iter/s, 1s/20 iters)", " (x iter/s", ", loss = ", ", lr = ", ", m = 0.9,", ", Testing net (#",
    "1)", "Train net output #0: ", "Test net output #1: ", "acc", " = ", "nan", "-1.#IND", "4.1066e-005", "1e999", "..",
    "Snapshotting ", "solver state ", "to ", "binary proto file", "HDF5 file ", "snap/x_iter_5.caffemodel  ", "Solving",
    "Solving_x", " ", "\n", "\x00", "]", "#", "I1399 99:99:99.123456 1 b] ",
]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40), st.integers(min_value=1, max_value=64))
def test_c_and_python_loops_agree_on_generated_lines(pieces, chunk):
    c_events, py_events = events_both_ways("".join(pieces).encode(), chunk=chunk, ipe=7)
    assert same(c_events, py_events)


from trainvisor.events import CheckpointEvent, Metric  # noqa: E402
from trainvisor.sinks import jsonl  # noqa: E402

OPT_INT = st.one_of(st.none(), st.integers(min_value=-(2**80), max_value=2**80))
OPT_FLOAT = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
METRICS = st.builds(Metric, st.text(max_size=8), st.floats(allow_nan=True, allow_infinity=True), OPT_INT,
                    st.sampled_from(["train", "val", "test"]), OPT_INT, OPT_FLOAT, OPT_FLOAT,
                    st.floats(min_value=0, max_value=2e9), st.integers(min_value=1, max_value=10**9),
                    st.sampled_from(["stdout", "stderr", "log"]), OPT_INT, st.booleans())
CHECKPOINTS = st.builds(CheckpointEvent, st.text(max_size=8), st.just("weights"), OPT_INT, OPT_FLOAT,
                        st.integers(min_value=1, max_value=99), st.floats(min_value=0, max_value=2e9))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(METRICS, CHECKPOINTS), max_size=20))
def test_c_jsonl_formatting_is_the_python_formatting(events):
    expected = "".join(map(jsonl._format_event, events))
    assert jsonl._c_format(events, Metric, jsonl._NAMES, jsonl._format_event) == expected
    # and both are the record's JSON: rank only when known, running only when true
    assert [json.loads(line) for line in expected.splitlines()] == \
        [json.loads(json.dumps(e.to_json_dict(), allow_nan=False)) for e in events]


from trainvisor.sinks import caffe_csv  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                          st.integers(min_value=-(2**60), max_value=2**60)), max_size=12))
def test_c_csv_row_is_the_python_row(cells):
    assert caffe_csv._c_csv_row(cells) == ",".join(map(caffe_csv._fmt, cells))


def csv_tables(events_batches, tmp_path, use_c: bool, tag: str) -> tuple:
    saved = caffe_csv._FAST
    try:
        caffe_csv._FAST = use_c
        sink = caffe_csv.CaffeCsvSink(tmp_path / tag, "x.log")
        for batch in events_batches:
            sink.write(batch)
        sink.close()
    finally:
        caffe_csv._FAST = saved
    return tuple((p.name, p.read_bytes()) for p in sorted((tmp_path / tag).iterdir()))


NAMES = st.sampled_from(["loss", "accuracy", "lr", "total_loss", "iter_per_sec", "mbox_loss"])
CSV_METRICS = st.builds(Metric, NAMES, st.one_of(st.floats(allow_nan=True), st.integers(-5, 5)),
                        st.one_of(st.none(), st.integers(0, 4)), st.sampled_from(["train", "test"]),
                        st.one_of(st.none(), st.integers(0, 2)), st.one_of(st.none(), st.floats(0, 100)),
                        st.none(), st.just(1.0), st.integers(1, 50))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.one_of(CSV_METRICS, CHECKPOINTS), max_size=12), max_size=6))
def test_c_csv_tables_are_the_python_tables(tmp_path_factory, batches):
    tmp = tmp_path_factory.mktemp("csv")
    assert csv_tables(batches, tmp, True, "c") == csv_tables(batches, tmp, False, "py")


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_c_csv_tables_agree_on_every_log(log, tmp_path):
    c_events, _ = events_both_ways(log.read_bytes())
    batches = [c_events[i:i + 1000] for i in range(0, len(c_events), 1000)]
    assert csv_tables(batches, tmp_path, True, "c") == csv_tables(batches, tmp_path, False, "py")


# -- the exact float fast paths (text -> double, double -> repr text) --------------------------

_scan_mod = pytest.importorskip("trainvisor.parsers._caffe_scan")
_format_mod = pytest.importorskip("trainvisor.sinks._format")

_decimal_text = st.builds(
    lambda sign, whole, frac, exp: f"{sign}{whole}{'.' + frac if frac is not None else ''}{exp}",
    st.sampled_from(["", "-", "+"]),
    st.from_regex(r"[0-9]{0,17}", fullmatch=True),
    st.one_of(st.none(), st.from_regex(r"[0-9]{0,17}", fullmatch=True)),
    st.one_of(st.just(""), st.from_regex(r"[eE][-+]?[0-9]{1,3}", fullmatch=True)),
)


@settings(max_examples=3000, deadline=None)
@given(_decimal_text)
def test_text_to_float_fast_path_is_exactly_float(text):
    got = _scan_mod.text_to_float(text)
    if got is None:
        return  # not handled by the fast path: CPython's parser does it
    want = float(text)
    assert math.copysign(1.0, got) == math.copysign(1.0, want) and got == want, text


@pytest.mark.parametrize("text", ["2.30259", "0.0839271", "4.1066e-005", "0.001", "1e-05", "-0.5", "123456.789012345",
                                  "0.000123", "1e22", "7"])
def test_text_to_float_fast_path_covers_caffe_numbers(text):
    assert _scan_mod.text_to_float(text) == float(text)


@settings(max_examples=5000, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                 st.floats(min_value=1e-4, max_value=1e15), st.floats(min_value=1e-23, max_value=1e-4),
                 st.decimals(min_value=-10**6, max_value=10**6, places=6, allow_nan=False).map(float),
                 st.integers(-10**16, 10**16).map(float)))
def test_float_repr_is_exactly_repr(x):
    assert _format_mod.float_repr(x) == repr(x)


def test_float_repr_on_values_near_the_fast_path_edges():
    import random

    rng = random.Random(7)
    values = [1e-22, 1.5e-05, 1e-05, 9.5e-23, 1e-4, 0.0001000000000000001, 9.999999999999999e-05, 1e15, 999999999999999.9, 4503599627370495.5,
              0.1 + 0.2, 1 / 3, 2 / 3, 5e-324, -0.0, 0.0, 2.5, 1e16, float("inf"), float("-inf")]
    values += [rng.uniform(0, 10) for _ in range(20000)] + [round(rng.uniform(0, 100), rng.randint(1, 12))
                                                             for _ in range(20000)]
    for x in values:
        assert _format_mod.float_repr(x) == repr(x), x


# -- the house rules for the C sources: files under 400 lines, functions under 60 -----------------

_C_SOURCES = sorted((FIXTURES.parent / "trainvisor").rglob("*.[ch]"))


def _c_function_lengths(text: str) -> dict[str, int]:
    """Lines of each top-level function: from its `name(...) {` line to the closing `}` in column 0."""
    out, start = {}, None
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if start is None and re.match(r"^[A-Za-z].*\)\s*\{\s*$", line):
            start = i
        elif start is not None and line.startswith("}"):
            out[lines[start].split("(")[0].split()[-1].lstrip("*")] = i - start + 1
            start = None
    return out


def test_c_sources_stay_small():
    assert {p.name for p in _C_SOURCES} >= {"_caffe_scan.c", "_caffe_grammar.h", "_format.c", "_pivot.c", "fastnum.h"}
    for path in _C_SOURCES:
        text = path.read_text()
        assert text.count("\n") <= 400, path.name
        lengths = _c_function_lengths(text)
        assert lengths and max(lengths.values()) <= 60, (path.name, max(lengths.items(), key=lambda kv: kv[1]))
