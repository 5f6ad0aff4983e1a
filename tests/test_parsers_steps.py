"""Steps as other tools write them, read by the `generic` parser.

Guild AI's output scalars: ``x: 1.1 (10)`` and ``x: 1.1 (step 10)`` give the step,
and it holds for the lines after it; a ``step: N`` line alone sets the step of the
records after it. Katib's metrics collector: ``name=value`` after an RFC 3339 time,
``{metricName: accuracy, metricValue: 0.8078}`` records (several to a line), and
``epoch: N`` lines printed between them. Each case asserts the names, values and
steps those tools report for the same input (fixtures/logs/guild-output-scalars.log,
fixtures/logs/katib-text.log and the small inputs below, written by this project).
"""
from __future__ import annotations

import pytest

from trainvisor.events import Metric

from .parsing_helpers import FIXTURES, chunked_events, parse_file, parse_text

GUILD_LOG = FIXTURES / "guild-output-scalars.log"
KATIB_LOG = FIXTURES / "katib-text.log"


def steps(events):
    return [(m.name, m.value, m.iteration) for m in events if type(m) is Metric]


def rows(events):
    return [(m.name, m.value, m.iteration, m.phase, m.epoch, m.line) for m in events if type(m) is Metric]


def test_guild_fixture_gives_guilds_names_values_and_steps():
    _, events = parse_file(GUILD_LOG, "generic")
    assert rows(events) == [
        ("loss", 2.302, 0, "train", None, 2),
        ("accuracy", 0.112, 0, "train", None, 3),
        ("loss", 0.481, 100, "train", None, 4),
        ("accuracy", 0.861, 100, "train", None, 5),  # "(step 100)"
        ("loss", 0.297, 200, "train", None, 7),  # after "step: 200"
        ("accuracy", 0.912, 200, "train", None, 8),
        ("loss", 0.305, 200, "val", None, 9),  # Guild's tag val_loss: our name loss, phase val
        ("loss", 0.221, 300, "train", None, 11),
        ("accuracy", 0.934, 300, "train", None, 12),
    ]


@pytest.mark.parametrize("text, want", [
    # a step in parentheses closes each line
    ("x: 1.1 (10)\ny: 1.2 (10)\nz: 1.3 (10)\n", [("x", 1.1, 10), ("y", 1.2, 10), ("z", 1.3, 10)]),
    ("x: 1 (step 1)\nx: 2 (step 2)\n", [("x", 1.0, 1), ("x", 2.0, 2)]),
    # a step given midway holds for the lines after it; before it Guild counts repeats
    # (0, 0, 1), we leave the step out: names and values agree. y's first value is
    # reported when y is printed again with another value (until then it may be a setting)
    ("x: 1.1\ny: 2.2\nx: 3.3\ny: 4.4 (10)\nx: 5.5\ny: 6.6\n",
     [("x", 1.1, None), ("x", 3.3, None), ("y", 2.2, None), ("y", 4.4, 10), ("x", 5.5, 10), ("y", 6.6, 10)]),
    # a "step: N" line alone
    ("step: 5\nloss: 0.5\nacc: 0.9\nstep: 6\nloss: 0.4\n",
     [("loss", 0.5, 5), ("acc", 0.9, 5), ("loss", 0.4, 6)]),
    ("global_step: 7\nloss: 0.5\n", [("loss", 0.5, 7)]),
])
def test_guild_step_forms(text, want):
    assert steps(parse_text(text, "generic")) == want


def test_guild_repeated_keys_are_a_series_without_invented_steps():
    # Guild numbers a key's repeats 0, 1, 2; the log gives no step, so none is reported
    assert steps(parse_text("x: 1.1\nx: 1.2\nx: 1.3\n", "generic")) == [
        ("x", 1.1, None), ("x", 1.2, None), ("x", 1.3, None)]
    # a value held as a possible setting is reported when its name comes again with another value
    assert steps(parse_text("x: 1.1\ny: 2.2\ny: 3.3\ny: 4.4\nx: 5.5\ny: 6.6\n", "generic")) == [
        ("y", 2.2, None), ("y", 3.3, None), ("y", 4.4, None), ("x", 1.1, None), ("x", 5.5, None), ("y", 6.6, None)]


def test_settings_held_before_the_start_are_never_reported_unless_printed_again():
    text = "batch_size: 4\ndropout: 0.5\nstep: 1\nloss: 0.9\ndropout: 0.5\nstep: 2\nloss: 0.8\n"
    assert steps(parse_text(text, "generic")) == [("loss", 0.9, 1), ("dropout", 0.5, 1), ("loss", 0.8, 2)]


def test_a_line_holding_a_step_and_a_metric_gives_only_its_own_record_the_step():
    assert steps(parse_text("step: 5 loss: 0.5\nacc: 0.9\n", "generic")) == [("loss", 0.5, 5), ("acc", 0.9, None)]


def test_a_step_in_parentheses_counts_only_on_a_line_of_one_pair():
    # MetricLogger's "loss: 0.3 (0.35)" (a running mean), a count mid-line, a glog shape
    # and a second pair give no step
    text = ("loss: 0.3 (0.35)\nloss: 0.2 (12) lr: 0.1\nI0827 net.cpp:127] Top shape: 64 (64)\n"
            "lr: 0.1 loss: 0.2 (7)\n  loss: 0.1 (8)\n")
    assert steps(parse_text(text, "generic")) == [
        ("loss", 0.3, None), ("loss", 0.2, None), ("lr", 0.1, None), ("shape", 64.0, None),  # net.cpp:127] is no pair
        ("lr", 0.1, None), ("loss", 0.2, None), ("loss", 0.1, 8)]


def test_an_epoch_line_sets_the_epoch_and_keeps_the_step():
    events = parse_text("step: 10\nepoch: 2\nloss: 0.5\nstep=20 loss=0.4\n", "generic")
    assert [(m.name, m.value, m.iteration, m.epoch) for m in events] == [
        ("loss", 0.5, 10, 2.0), ("loss", 0.4, 20, 2.0)]


def test_katib_fixture_gives_katibs_values_under_our_names():
    _, events = parse_file(KATIB_LOG, "generic")
    assert rows(events) == [
        # lr=0.01 momentum=0.9 before the first epoch: configuration
        ("accuracy", 0.8078, None, "train", 1.0, 3),  # {metricName: accuracy, metricValue: 0.8078}
        ("loss", 0.5183, None, "train", 1.0, 3),
        ("accuracy", 0.7911, None, "val", 1.0, 4),  # Katib's default filter: Validation-accuracy=0.7911
        ("loss", 0.5602, None, "val", 1.0, 4),
        ("accuracy", 0.881, None, "train", 2.0, 6),
        ("loss", 0.3634, None, "train", 2.0, 6),
        ("accuracy", 0.8502, None, "val", 2.0, 7),
        ("loss", 0.441, None, "val", 2.0, 7),
        ("loss", -0.4759, None, "train", 2.0, 8),  # a record without the time Katib reads first
    ]


@pytest.mark.parametrize("text, want", [
    ("2024-03-04T17:55:08Z INFO     {metricName: accuracy, metricValue: 100}\n", [("accuracy", 100.0, None)]),
    ("2024-03-04T17:55:08Z INFO     {metricName: accuracy, metricValue: 888.333}\n", [("accuracy", 888.333, None)]),
    ("invalid INFO     {metricName: loss, metricValue: 0.3634}\n", [("loss", 0.3634, None)]),
    # Katib's filter rejects ".333" and "888."; a reader sees numbers, and so do we
    ("{metricName: accuracy, metricValue: .333}\n", [("accuracy", 0.333, None)]),
    ("{metricName: accuracy, metricValue: - 345.333}\n", []),
    ("2024-03-04T17:55:08Z INFO accuracy=0.9 loss=1e-3\n", [("accuracy", 0.9, None), ("loss", 0.001, None)]),
])
def test_katib_text_forms(text, want):
    assert steps(parse_text(text, "generic")) == want


@pytest.mark.parametrize("path", [GUILD_LOG, KATIB_LOG], ids=lambda p: p.name)
@pytest.mark.parametrize("chunk", [0, 1, 7, 1 << 20])
def test_live_equals_replay(path, chunk):
    _, whole = parse_file(path, "generic")
    want = [m._replace(value=repr(m.value), wall_time=0.0, stream="") for m in whole]  # a replay says "log"
    assert [m._replace(stream="") for m in chunked_events(path, "generic", chunk)] == want


@pytest.mark.parametrize("path", [GUILD_LOG, KATIB_LOG], ids=lambda p: p.name)
def test_auto_reads_them_with_generic(path):
    parser, events = parse_file(path, "auto")
    assert parser.chosen == "generic" and rows(events) == rows(parse_file(path, "generic")[1])
