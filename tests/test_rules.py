"""User rules files: valid rules, each invalid case with its exact message, and a catastrophic
pattern stopped within its timeout."""
from __future__ import annotations

import math
import time

import pytest

from trainvisor.cli import main
from trainvisor.stream.lines import LineSplitter
from trainvisor.parsers import ParserOptions
from trainvisor.parsers.rules import RulesError, RulesParser, load_rules
from trainvisor.parsers.select import build_parser

from .parsing_helpers import FIXTURES, series

VALID_YAML = r"""
mode: add
timeout: 0.2
rules:
  - name: ner_loss
    contains: "NER loss"
    pattern: 'step:(?P<step>\d+)/\d+, NER loss:(?P<value>\S+)'
  - name: eval
    pattern: 'eval acc (?P<accuracy>\S+) f1 (?P<f1>\S+) at epoch (?P<epoch>\d+)'
    phase: val
  - name: named
    pattern: '(?P<name>\w+) is now (?P<value>\S+)'
    metric: ignored_when_a_name_group_exists
"""


def feed(parser, text: str):
    sp = LineSplitter("t")
    out = []
    for block in (sp.feed(text.encode(), 0.0, 0.0), sp.finish(0.0, 0.0)):
        if block is not None:
            out.extend(parser.feed(block))
    return out + parser.finish()


def write(tmp_path, body: str, name: str = "rules.yaml"):
    p = tmp_path / name
    p.write_text(body)
    return p


def test_valid_yaml_rules_give_metrics_with_step_epoch_phase_and_nan(tmp_path):
    parser = build_parser("generic", ParserOptions(), rules=write(tmp_path, VALID_YAML))
    events = feed(parser, "x - INFO - iteration:1 step:100/23196, NER loss:nan\n"
                          "eval acc 0.91 f1 0.88 at epoch 3\n"
                          "temperature is now 1e-005\n")
    ner = series(events, "ner_loss")
    assert len(ner) == 1 and math.isnan(ner[0].value) and ner[0].iteration == 100 and ner[0].line == 1
    assert [(m.name, m.value, m.epoch) for m in events if m.phase == "val"] == [
        ("accuracy", 0.91, 3.0), ("f1", 0.88, 3.0)]
    assert series(events, "temperature")[0].value == 1e-05
    # mode add: the generic parser's own metrics are there too, in line order
    assert series(events, "loss")[0].iteration == 100
    assert [e.line for e in events] == sorted(e.line for e in events)


def test_toml_rules_in_replace_mode_drop_the_builtin_parser(tmp_path):
    body = 'mode = "replace"\n[[rules]]\nname = "loss"\npattern = \'loss (?P<value>\\S+)\'\n'
    parser = build_parser("auto", ParserOptions(), rules=write(tmp_path, body, "rules.toml"))
    assert isinstance(parser, RulesParser) and parser.base is None
    events = feed(parser, "loss 0.5 lr=0.1\n")
    assert [(m.name, m.value) for m in events] == [("loss", 0.5)]


def test_rules_add_to_a_builtin_format(tmp_path):
    body = "rules:\n  - name: gpu_temp\n    pattern: 'GPU temp (?P<value>\\d+)C'\n    contains: GPU temp\n"
    parser = build_parser("mxnet", ParserOptions(), rules=write(tmp_path, body))
    text = (FIXTURES / "mxnet.log").read_text() + "GPU temp 71C\n"
    events = feed(parser, text)
    assert series(events, "gpu_temp")[0].value == 71.0
    assert len(series(events, "accuracy", "val")) == 1


@pytest.mark.parametrize("body,message", [
    ("rules:\n  - name: loss\n    pattern: '(?P<value>\\d+'\n",
     "rule 'loss': pattern does not compile: missing ) at position 13"),
    ("rules:\n  - name: x\n    pattern: 'loss (\\d+)'\n",
     "rule 'x': pattern has no (?P<value>...) group and no fixed metric name"),
    ("rules:\n  - name: x\n    pattern: '(?P<name>\\w+)=(?P<step>\\d+)'\n",
     "rule 'x': pattern has a (?P<name>...) group but no (?P<value>...) group"),
    ("rules:\n  - name: x\n", "rule 'x': needs a 'pattern'"),
    ("rules:\n  - pattern: '(?P<value>.)'\n", "rule #1: needs a 'name'"),
    ("rules:\n  - just a string\n", "rule #1: expected a mapping with name and pattern"),
    ("rules:\n  - name: x\n    pattern: '(?P<value>.)'\n    phase: training\n",
     "rule 'x': phase must be one of train, val, test (got 'training')"),
    ("rules:\n  - name: x\n    patern: '(?P<value>.)'\n",
     "rule 'x': unknown key 'patern' (expected contains, metric, name, pattern, phase)"),
    ("rules:\n  - name: x\n    pattern: '(?P<value>.)'\n  - name: x\n    pattern: '(?P<value>.)'\n",
     "rule 'x': name used by an earlier rule"),
    ("mode: merge\nrules:\n  - name: x\n    pattern: '(?P<value>.)'\n", "mode must be 'add' or 'replace' (got 'merge')"),
    ("timeout: 0\nrules:\n  - name: x\n    pattern: '(?P<value>.)'\n",
     "timeout must be a number of seconds in (0, 10] (got 0)"),
    ("rules: []\n", "expected a mapping with a non-empty 'rules' list"),
    ("rules: [\n", "not valid YAML: while parsing a flow node"),
])
def test_invalid_rules_file_is_one_line_error_naming_file_and_rule(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(RulesError) as info:
        load_rules(path)
    assert str(info.value) == f"{path}: {message}"
    assert "\n" not in str(info.value)


def test_missing_rules_file_names_the_file(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(RulesError, match=r"nope\.yaml: cannot read: No such file or directory$"):
        load_rules(path)


def test_catastrophic_pattern_is_stopped_by_its_timeout_and_disabled(tmp_path, caplog):
    body = ("timeout: 0.1\nrules:\n"
            "  - name: evil\n    pattern: '(?P<value>(a|aa)+)$'\n"
            "  - name: fine\n    pattern: 'loss (?P<value>\\S+)'\n")
    parser = build_parser("generic", ParserOptions(), rules=write(tmp_path, body))
    text = "a" * 60 + "b\n" + "a" * 60 + "b loss 0.5\n"
    start = time.monotonic()
    events = feed(parser, text)
    elapsed = time.monotonic() - start
    assert elapsed < 1.0  # one timeout (0.1 s), then the rule is disabled
    assert len(parser.timeouts) == 1
    assert parser.timeouts[0] == (f"{tmp_path / 'rules.yaml'}: rule 'evil': match took longer than 0.1 s "
                                  "on line 1; rule disabled")
    assert any("rule disabled" in r.getMessage() for r in caplog.records)
    assert series(events, "fine")[0].value == 0.5


def test_cli_reports_a_bad_rules_file_in_one_line(tmp_path, capsys):
    rules = write(tmp_path, "rules:\n  - name: loss\n    pattern: '(?P<value>\\d+'\n")
    log = tmp_path / "a.log"
    log.write_text("loss 1\n")
    with pytest.raises(SystemExit) as info:
        main(["parse", "--jsonl", "--rules", str(rules), str(log)])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err == f"trainvisor: {rules}: rule 'loss': pattern does not compile: missing ) at position 13\n"


def test_a_rule_takes_every_match_on_a_line(tmp_path):
    rules = tmp_path / "pairs.yaml"
    rules.write_text("mode: replace\nrules:\n  - name: pairs\n    pattern: '(?P<name>\\w+)=(?P<value>\\d+(?:\\.\\d+)?)'\n")
    events = feed(build_parser("auto", rules=rules), (FIXTURES / "pairs-every-match.log").read_text())
    assert [(m.name, m.value, m.line) for m in events] == [
        ("a", 1.0, 2), ("b", 2.0, 2), ("c", 3.0, 2), ("a", 4.0, 3), ("b", 5.0, 3), ("loss", 0.5, 5), ("loss", 0.4, 5)]


def test_every_match_keeps_its_own_step(tmp_path):
    rules = tmp_path / "steps.yaml"
    rules.write_text("mode: replace\nrules:\n  - name: s\n    pattern: 'step (?P<step>\\d+): (?P<value>[\\d.]+)'\n")
    events = feed(build_parser("auto", rules=rules), "step 1: 0.5 step 2: 0.25\n")
    assert [(m.name, m.value, m.iteration) for m in events] == [("s", 0.5, 1), ("s", 0.25, 2)]
