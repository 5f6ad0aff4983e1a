"""Property tests: no parser raises on arbitrary input, and none invents a metric from a
line that carries none of its markers."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from trainvisor.events import Metric
from trainvisor.stream.lines import LineSplitter
from trainvisor.parsers import ParserOptions, available_parsers, create_parser, parser_infos

NAMES = [n for n, _ in available_parsers()]
MARKERS = {i.name: i.markers for i in parser_infos()}
# Caffe reads glog lines only: "I0101 00:00:00.000000 1 file.cpp:1] ..."
assert MARKERS["caffe"] == ("] ",)

# Pieces of real lines of every format, so generated text often gets close to a real line.
FRAGMENTS = [
    "Epoch[", "Epoch ", "Epoch: [", "[Epoch ", "Batch [", "Speed: ", "samples/sec", "Train-", "Validation-",
    "accuracy=", "loss: ", "loss=", " - loss: ", " - val_acc: ", "{'loss': ", "'epoch': ", "%|", "it/s, ",
    "iter: ", "total_loss: ", "copypaste: ", "AP,AP50", "Epoch(val) [", "[1][50/100]", '{"mode": "train", ',
    "INFO:tensorflow:loss = ", ", step = ", "global_step/sec: ", "Saving checkpoints for ", "0/99", "1.86G",
    "all ", "Region 16 Avg IOU: ", "-nan", " avg, ", " rate, ", " seconds, ", " images", "nan", "inf", "1e-005",
    "1.#QNAN", "-", "/", ":", "=", "]", "[", ",", " ", "\t", "0", "12", "3.5", "\x00", "\x1b[1m", "\r", "\b",
    "I0101 00:00:00.000000 1 solver.cpp:1] ", "Iteration 10, loss = ", "Train net output #0: loss = ",
    "Saved checkpoint to \"", ".params\"", "Saving weights to ", "model_0001.pth", "Test set: Average loss: ",
]

line_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=14).map("".join)


def run(name: str, data: bytes, chunks: list[int]):
    parser = create_parser(name, ParserOptions(year=2026))
    sp = LineSplitter("t", max_line=4096)
    events = []
    pos = 0
    for size in chunks + [len(data)]:
        block = sp.feed(data[pos:pos + size], 0.0, 0.0)
        pos += size
        if block is not None:
            events.extend(parser.feed(block))
    block = sp.finish(0.0, 0.0)
    if block is not None:
        events.extend(parser.feed(block))
    events.extend(parser.finish())
    return events


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.one_of(st.binary(max_size=600),
                      st.lists(line_text, max_size=12).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass"))),
       chunks=st.lists(st.integers(1, 64), max_size=6))
def test_no_parser_raises_on_arbitrary_bytes(name, data, chunks):
    for ev in run(name, data, chunks):
        assert type(ev) is not Metric or isinstance(ev.value, float)


@pytest.mark.parametrize("name", [n for n in NAMES if n != "auto"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(lines=st.lists(line_text.map(lambda s: s.replace("\n", " ").replace("\r", " ")), min_size=1, max_size=10))
def test_no_metric_from_lines_without_the_parsers_markers(name, lines):
    markers = MARKERS[name]
    assert markers, f"parser {name} declares no markers"
    lines = [ln for ln in lines if not any(m in ln for m in markers)]
    assume(lines)
    events = run(name, ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"), [])
    assert [e for e in events if type(e) is Metric] == []


def test_auto_never_invents_a_metric_from_marker_free_lines():
    all_markers = {m for n, ms in MARKERS.items() if ms for m in ms}
    text = "".join(f"plain progress line number {i} done\n" for i in range(600))
    assert not any(m in text for m in all_markers)
    assert [e for e in run("auto", text.encode(), [100, 1000]) if type(e) is Metric] == []
