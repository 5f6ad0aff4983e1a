"""Retention's choice (uploaders/retention.py) and the values it ranks by (uploaders/values.py):
a real Caffe log (DIGITS LeNet: a snapshot every 13 iterations, each followed by the test at the
same iteration) replayed into `BestByValues`, and properties of `select_deletions` against a
brute-force statement of the policy."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trainvisor
from trainvisor.errors import ConfigError
from trainvisor.events import CheckpointEvent, Metric
from trainvisor.uploaders.retention import (RetainedSet, RetentionPolicy, SetValue, best_by_problem,
                                            parse_best_by, select_deletions)
from trainvisor.uploaders.values import BestByValues
from tests.conftest import real_logs

LOG = "digits-robond-lenet.log"


def _replayed(log: str = LOG):
    values = BestByValues(parse_best_by("accuracy max"))
    replayed = trainvisor.replay(real_logs("caffe") / log, sinks=[values])
    return values, replayed.events


def _snapshots(events) -> list[int]:
    return sorted({e.iteration for e in events if isinstance(e, CheckpointEvent) and e.path.endswith(".caffemodel")})


def _tests(events) -> dict[int, float]:
    return {m.iteration: m.value for m in events
            if isinstance(m, Metric) and m.phase == "test" and m.name == "accuracy"}


def _sets(values: BestByValues, iterations: list[int]) -> list[RetainedSet]:
    return [RetainedSet(f"s{it}.manifest.json", f"snapshot_iter_{it}", (True, it, False, 0.0, 0.0),
                        (f"s{it}.caffemodel", f"s{it}.manifest.json"), values.value_at(it, None)) for it in iterations]


def test_a_set_takes_the_test_value_of_its_own_iteration_from_a_real_caffe_log():
    values, events = _replayed()
    snapshots, tests = _snapshots(events), _tests(events)
    assert len(snapshots) == 30 and len(tests) == 31
    for it in snapshots:  # Caffe tests at iteration N right after writing the snapshot of N
        assert values.value_at(it, None) == SetValue(tests[it], True)


@pytest.mark.parametrize("log, kept_sets", [
    ("bearpaw-fork-mnist.log", 3),  # its best test accuracy (0.9921) at iteration 6000 of 10000
    ("digits-robond-lenet.log", 2),  # its best (0.974265) at 338, 351 and 390: a tie goes to the newer
])
def test_keep_last_2_and_the_best_by_test_accuracy_on_real_caffe_logs(log, kept_sets):
    values, events = _replayed(log)
    snapshots, tests = _snapshots(events), _tests(events)
    best = max(snapshots, key=lambda it: (tests[it], it))
    deleted = select_deletions(_sets(values, snapshots), RetentionPolicy.of(2, 1, "accuracy max"))
    kept = set(snapshots) - {int(s.name.rpartition("_")[2]) for s in deleted}
    assert kept == {snapshots[-1], snapshots[-2], best}
    assert len(kept) == kept_sets and len(deleted) == len(snapshots) - kept_sets


def test_a_set_whose_test_has_not_been_parsed_yet_is_undecided_and_kept():
    """Fed the log's records up to the snapshot of iteration 26 (its test comes next): set 26's
    value is still that of iteration 13's test, undecided, so it is neither deleted nor does it
    push another out; set 13 is decided."""
    _, events = _replayed()
    values = BestByValues(parse_best_by("test/accuracy max"))
    for e in events:
        if isinstance(e, CheckpointEvent) and e.iteration == 26:
            break
        values.write([e])
    tests = _tests(events)
    assert values.value_at(26, None) == SetValue(tests[13], False)
    assert values.value_at(13, None) == SetValue(tests[13], True)
    sets = _sets(values, [13, 26])
    assert select_deletions(sets, RetentionPolicy.of(None, 1, "accuracy max")) == ()
    values.close()  # the log ended: every value is decided
    assert values.value_at(26, None) == SetValue(tests[13], True)


def test_best_by_is_read_as_metric_and_goal_and_a_bad_one_is_one_line():
    assert parse_best_by("val/accuracy max").phases == ("val",)
    assert parse_best_by("accuracy MAX").phases == ("val", "test")
    assert parse_best_by("train/loss min").maximise is False
    assert best_by_problem("accuracy") == "must be 'METRIC max' or 'METRIC min' (e.g. 'val/accuracy max')"
    with pytest.raises(ConfigError, match="needs upload.best_by"):
        RetentionPolicy.of(None, 1, None)
    with pytest.raises(ConfigError, match="keep_last: must be at least 1"):
        RetentionPolicy.of(0, None, None)


# -- properties, against the policy stated by brute force ----------------------------------

_SETS = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 5)), st.booleans()), min_size=1, max_size=9)


def _make(spec) -> list[RetainedSet]:
    return [RetainedSet(f"k{i}", f"n{i}", (True, i), (f"f{i}", f"k{i}"),
                        SetValue(None if v is None else float(v), decided)) for i, (v, decided) in enumerate(spec)]


def _kept_by_definition(sets: list[RetainedSet], keep_last, keep_best) -> set[str]:
    """The newest, the keep_last newest, the keep_best best by value (ties: the newer), as the
    README states it; every value final."""
    kept = {sets[-1].set_key}
    if keep_last:
        kept |= {s.set_key for s in sets[-keep_last:]}
    if keep_best:
        valued = sorted((s for s in sets if s.value.value is not None), key=lambda s: (s.value.value, s.order))
        kept |= {s.set_key for s in valued[-keep_best:]}
    return kept


@settings(max_examples=300, deadline=None)
@given(spec=_SETS, keep_last=st.one_of(st.none(), st.integers(1, 4)), keep_best=st.one_of(st.none(), st.integers(1, 3)),
       finals=st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=9, max_size=9))
def test_no_deleted_set_could_be_kept_whatever_the_undecided_values_turn_out_to_be(spec, keep_last, keep_best, finals):
    if keep_last is None and keep_best is None:
        keep_last = 1
    policy = RetentionPolicy.of(keep_last, keep_best, "accuracy max" if keep_best else None)
    sets = _make(spec)
    deleted = {s.set_key for s in select_deletions(sets, policy)}
    settled = _make([(v if d else f, True) for (v, d), f in zip(spec, finals)])
    assert not deleted & _kept_by_definition(settled, keep_last, keep_best)
    if all(d for _, d in spec):  # nothing undecided: exactly what the definition does not keep
        assert deleted == {s.set_key for s in sets} - _kept_by_definition(sets, keep_last, keep_best)
