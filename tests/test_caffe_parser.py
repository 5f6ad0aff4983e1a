"""The Caffe parser on project-written logs and on hostile lines."""
from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from trainvisor.events import CheckpointEvent, Metric
from trainvisor.stream.lines import LineSplitter
from trainvisor.parsers import ParserOptions, create_parser

from .caffe_helpers import replay_events
from .conftest import FIXTURES

NEW_YEAR_LOG = FIXTURES / "logs" / "lenet-newyear.log"


def parse_text(text: str, **opts) -> list:
    parser = create_parser("caffe", ParserOptions(year=2026, **opts))
    sp = LineSplitter("s")
    block = sp.feed(text.encode(), 0.0, 0.0)
    out = parser.feed(block) if block else []
    last = sp.finish(0.0, 0.0)
    if last:
        out += parser.feed(last)
    return out


def test_run_across_new_year_has_increasing_non_negative_seconds():
    metrics = replay_events(NEW_YEAR_LOG).metrics
    seconds = [m.seconds for m in metrics]
    assert all(s is not None and s >= 0 for s in seconds)
    assert seconds == sorted(seconds)
    last = metrics[-1]
    # 'I0101 00:01:20.267696 ... Iteration 1000, loss = 0.0119819' vs 'I1231 23:58:00.001527 ... Solving LeNet'
    assert (last.name, last.iteration, last.value) == ("total_loss", 1000, 0.0119819)
    assert last.seconds == 200.266169


def test_every_metric_kind_with_iteration_phase_and_net():
    text = (
        "I0827 10:27:16.124927 28582 solver.cpp:250] Solving LeNet\n"
        "I0827 10:27:16.125336 28582 solver.cpp:294] Iteration 0, Testing net (#1)\n"
        "I0827 10:27:16.262982 28582 solver.cpp:343]     Test net output #0: accuracy = 0.0756\n"
        "I0827 10:27:17.000000 28582 solver.cpp:214] Iteration 20 (13.19 iter/s, 1.516s/20 iters), loss = -nan\n"
        "I0827 10:27:17.000001 28582 solver.cpp:229]     Train net output #0: loss = inf (* 1 = inf loss)\n"
        "I0827 10:27:17.000002 28582 sgd_solver.cpp:106] Iteration 20, lr = 4.1066e-005\n"
        "I0827 10:27:17.000003 28582 solver.cpp:361] Snapshotting to binary proto file snap/lenet_iter_20.caffemodel\n"
        "I0827 10:27:17.000004 28582 sgd_solver.cpp:273] Snapshotting solver state to HDF5 file snap/lenet_iter_20.solverstate.h5\n"
    )
    events = parse_text(text, iters_per_epoch=10)
    m = [e for e in events if type(e) is Metric]
    assert [(x.name, x.phase, x.iteration, x.test_net, x.line) for x in m] == [
        ("accuracy", "test", 0, 1, 3),
        ("iter_per_sec", "train", 20, None, 4),
        ("total_loss", "train", 20, None, 4),
        ("loss", "train", 20, None, 5),
        ("lr", "train", 20, None, 6),
    ]
    assert math.isnan(m[2].value) and m[3].value == math.inf and m[4].value == 4.1066e-05
    assert m[4].epoch == 2.0 and m[0].seconds == 0.138055
    ck = [e for e in events if isinstance(e, CheckpointEvent)]
    assert [(c.path, c.kind, c.iteration, c.line) for c in ck] == [
        ("snap/lenet_iter_20.caffemodel", "weights", 20, 7),
        ("snap/lenet_iter_20.solverstate.h5", "solverstate", 20, 8),
    ]


def test_lines_that_merely_mention_caffe_words_produce_nothing():
    noise = (
        "Iteration 100, loss = 0.5\n"  # a pycaffe print, no glog prefix
        "Solving...\n"
        "sh: 1: caffe: Iteration 5, lr = 1: not found\n"
        "I0827 10:27:16.124927 28582 net.cpp:150] Train net output blob loss = not a number\n"
        "  Test net output #0: accuracy = 0.9\n"
        "\x00\x00I0827 10:27:16.124927 28582 solver.cpp:214] Iteration 1, loss = 3\n"
        "I0827 10:27:16.124927 28582 solver.cpp:214] Iteration x, loss = 3\n"
        "I1399 99:99:99.999999 28582 solver.cpp:214] Iteration 7, loss = 3\n"
    )
    events = parse_text(noise)
    # Only the last line has a glog shape; its impossible date yields no seconds, not a crash.
    assert [(e.name, e.iteration, e.seconds) for e in events] == [("total_loss", 7, None)]


GLOG_LIKE = st.text(
    alphabet=st.sampled_from(list("I0123456789 :.,=#()-+e]naifSolvingIteration lossr Test net output")), max_size=120
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(GLOG_LIKE, st.binary(max_size=80).map(lambda b: b.decode("latin-1"))), max_size=30))
def test_arbitrary_text_never_raises_and_metrics_come_only_from_marked_lines(lines):
    text = "\n".join(lines)
    events = parse_text(text)
    src = text.replace("\r\n", "\n").split("\n")
    for e in events:
        if type(e) is Metric:
            line = src[e.line - 1] if e.line - 1 < len(src) else ""
            assert "Iteration" in line or "net output" in line


def test_msvc_nan_spellings_are_metrics_and_garbage_values_are_not():
    text = (
        "I0827 10:27:17.000001 28582 solver.cpp:229]     Train net output #0: loss = 1.#QNAN (* 1 = 1.#QNAN loss)\n"
        "I0827 10:27:17.000002 28582 solver.cpp:229]     Train net output #1: top1 = -1.#INF\n"
        "I0827 10:27:17.000003 28582 solver.cpp:229]     Train net output #2: acc = ..e\n"
        "I0827 10:27:17.000004 28582 sgd_solver.cpp:106] Iteration 20, lr = nan\n"
    )
    events = parse_text(text)
    assert [(e.name, e.line) for e in events] == [("loss", 1), ("top1", 2), ("lr", 4)]
    assert math.isnan(events[0].value) and events[1].value == -math.inf and math.isnan(events[2].value)
