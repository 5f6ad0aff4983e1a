"""A TensorFlow 1 Estimator log as users send it (fixtures/logs/tensorflow-estimator-absl.log,
written by fixtures/tf_estimator_log.py): `nohup`, screens of deprecation warnings, every
message printed twice (TensorFlow's ``INFO:tensorflow:`` form and absl's glog-style copy).

`auto` chooses tensorflow on it, each record is reported once, and `generic` reads no source
location (``estimator.py:371]``) as a metric there or in any real log. The expected records are
computed here from the log's ``INFO:tensorflow:`` lines, never taken from a parser."""
from __future__ import annotations

import re

import pytest

from fixtures.tf_estimator_log import generate_tf_estimator_log
from trainvisor.events import CheckpointEvent, Metric
from trainvisor.parsers.chooser import WINDOW

from .parsing_helpers import FIXTURES, REAL_LOGS, parse_file, parse_text

LOG = FIXTURES / "tensorflow-estimator-absl.log"
LINES = LOG.read_text().splitlines(keepends=True)
ABSL = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ [\w.]+\.py:\d+\] ")
TF_FORM = re.compile(r"^(?:INFO|WARNING):tensorflow:")
SOURCE_FILE = re.compile(r"\.(?:py|cc|cpp|h)$")


def expected_records(lines) -> list[tuple]:
    """What the log holds, one row per record, read from the INFO:tensorflow: lines alone."""
    out = []
    for text in lines:
        if not text.startswith("INFO:tensorflow:"):
            continue
        msg = text[len("INFO:tensorflow:"):].rstrip("\n")
        if m := re.fullmatch(r"loss = (\S+), step = (\d+)(?: \(\S+ sec\))?", msg):
            out.append(("loss", float(m.group(1)), int(m.group(2)), "train"))
        elif m := re.fullmatch(r"global_step/sec: (\S+)", msg):
            out.append(("global_step/sec", float(m.group(1))))
        elif m := re.fullmatch(r"Saving checkpoints for (\d+) into (\S+)\.", msg):
            out.append((f"{m.group(2)}-{m.group(1)}", int(m.group(1))))
        elif m := re.fullmatch(r"Saving dict for global step (\d+): (.*)", msg):
            values = dict(kv.split(" = ") for kv in m.group(2).split(", "))
            step = int(m.group(1))
            out += [("accuracy", float(values["accuracy"]), step, "val"), ("loss", float(values["loss"]), step, "val")]
        elif m := re.fullmatch(r"Loss for final step: (\S+)\.", msg):
            last_step = max(r[2] for r in out if r[0] == "loss")
            out.append(("loss", float(m.group(1)), last_step, "train"))
    return out


def rows(events) -> list[tuple]:
    """The events as expected_records writes them (a rate's step is the parser's business)."""
    out = []
    for e in events:
        if isinstance(e, CheckpointEvent):
            out.append((e.path, e.iteration))
        elif e.name == "global_step/sec":
            out.append((e.name, e.value))
        else:
            out.append((e.name, e.value, e.iteration, e.phase))
    return out


EXPECTED = expected_records(LINES)


def test_the_fixture_is_what_its_generator_writes():
    assert "".join(generate_tf_estimator_log()) == "".join(LINES)


def test_the_fixture_has_the_shape_users_send():
    """More than auto's window of lines before TensorFlow's first INFO line; every INFO line
    followed by absl's copy of the same message."""
    assert LINES[0] == "nohup: ignoring input\n"
    first_info = next(i for i, t in enumerate(LINES) if t.startswith("INFO:tensorflow:"))
    assert first_info > WINDOW
    assert sum(t.startswith("WARNING:tensorflow:") for t in LINES[:first_info]) >= 80
    for i, text in enumerate(LINES):
        if text.startswith("INFO:tensorflow:"):
            copy = LINES[i + 1]
            assert ABSL.match(copy) and copy[ABSL.match(copy).end():] == text[len("INFO:tensorflow:"):]
    kinds = [r[0] for r in EXPECTED]
    assert (kinds.count("loss"), kinds.count("global_step/sec"), kinds.count("accuracy")) == (35, 30, 3)


@pytest.mark.parametrize("parser", ["tensorflow", "auto"])
def test_every_record_is_reported_once(parser):
    p, events = parse_file(LOG, parser)
    assert getattr(p, "chosen", "tensorflow") == "tensorflow"
    assert rows(events) == EXPECTED
    # each record from the first line of its pair: the INFO:tensorflow: form
    assert all(LINES[e.line - 1].startswith("INFO:tensorflow:") for e in events)


def test_auto_chooses_tensorflow_at_the_estimators_first_line():
    """The warnings fill the window: generic reads them meanwhile (nothing in them is a metric),
    and the Estimator's ``Using config`` line switches to tensorflow."""
    p, _ = parse_file(LOG, "auto")
    first_info = next(i for i, t in enumerate(LINES) if t.startswith("INFO:tensorflow:"))
    assert LINES[first_info].startswith("INFO:tensorflow:Using config: {")
    assert p.switched and p.reason.startswith(f"switched from generic at line {first_info + 1}: ")


@pytest.mark.parametrize("keep", ["tensorflow", "absl"])
def test_one_form_alone_still_gives_every_record(keep):
    """A log with only one handler's lines (absl not set up, or TensorFlow's own handler removed)."""
    other = ABSL if keep == "tensorflow" else TF_FORM
    text = "".join(t for t in LINES if not other.match(t))
    for parser in ("tensorflow", "auto"):
        assert rows(parse_text(text, parser)) == EXPECTED, parser


def test_generic_reads_the_records_of_both_forms_and_no_source_location():
    """generic has no duplicate rule: each record twice, from both forms; never `estimator.py`."""
    _, events = parse_file(LOG, "generic")
    losses = [(e.value, e.iteration) for e in events if e.name == "loss" and ", step = " in LINES[e.line - 1]]
    assert losses == [(r[1], r[2]) for r in expected_records(t for t in LINES if ", step = " in t) for _ in "ab"]
    assert len(losses) == 62
    assert not [e.name for e in events if SOURCE_FILE.search(e.name)]


REAL = sorted(REAL_LOGS.glob("*/*.log")) if REAL_LOGS.is_dir() else []
BERT = REAL_LOGS / "tensorflow" / "bert-similarity-estimator.log"


@pytest.mark.skipif(not BERT.is_file(), reason=f"real log not found: {BERT}")
def test_auto_chooses_tensorflow_on_the_real_bert_log_at_its_estimators_first_line():
    """Its ``INFO:tensorflow:***** Running training *****`` (line 56) no longer makes it a Hugging
    Face log until TensorFlow's records outnumber it: the Estimator's ``Using config`` decides."""
    lines = BERT.read_text(encoding="utf-8").splitlines()
    first = next(i for i, t in enumerate(lines) if t.startswith("INFO:tensorflow:Using config: {")) + 1
    banner = lines.index("INFO:tensorflow:***** Running training *****") + 1
    p, _ = parse_file(BERT, "auto")
    assert (first, banner) == (4, 56)
    assert p.chosen == "tensorflow" and not p.switched
    assert p.reason == f"1 tensorflow signature lines in the first {first} lines"
GLOG_PLACE = re.compile(rb"\b\w+\.(?:py|cc|cpp|h|hpp):\d+\]")


@pytest.mark.skipif(not REAL, reason=f"real logs not found at {REAL_LOGS}")
def test_most_real_logs_name_source_locations():
    """The real logs below hold glog places (Caffe, TensorFlow's C++ start-up lines, NCCL):
    the next test would see a metric named after one."""
    assert sum(bool(GLOG_PLACE.search(p.read_bytes())) for p in REAL) >= 17


@pytest.mark.parametrize("log", REAL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_generic_reports_no_metric_named_after_a_source_file(log):
    _, events = parse_file(log, "generic")
    assert not sorted({e.name for e in events if type(e) is Metric and SOURCE_FILE.search(e.name)})
