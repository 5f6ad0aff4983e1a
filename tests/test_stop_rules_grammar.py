"""The stop rules' grammar: every form the issue names parses into the spec it means, and every
bad rule is one line naming the rule and the column, from a flag or a config file, before the
child is started (exit 2)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from trainvisor.config import RunConfig
from trainvisor.errors import ConfigError
from trainvisor.stoprules import parse_rule
from trainvisor.stoprules.grammar import Bound, Divergence, NotFinite, Plateau, Silence, Threshold


@pytest.mark.parametrize("text, kind, fields", [
    ("loss is nan", NotFinite, {"kind": "nan"}),
    ("loss is inf", NotFinite, {"kind": "inf"}),
    ("val/loss is not finite", NotFinite, {"kind": "not finite"}),
    ("accuracy >= 0.98", Threshold, {"op": ">=", "value": 0.98}),
    ("test/loss < 1e-3", Threshold, {"op": "<", "value": 0.001}),
    ("lr != -0.5", Threshold, {"op": "!=", "value": -0.5}),
    ("val/accuracy no improvement in 5 evals", Plateau, {"evals": 5, "maximise": True}),
    ("val_loss no improvement in 3 evals", Plateau, {"evals": 3, "maximise": False}),
    ("test/accuracy_top-5 no improvement in 1 eval", Plateau, {"evals": 1, "maximise": True}),
    ("score no improvement in 2 evals (max)", Plateau, {"evals": 2, "maximise": True}),
    ("score no decrease in 4 evaluations", Plateau, {"evals": 4, "maximise": False}),
    ("iteration >= 10000", Bound, {"field": "iteration", "op": ">=", "value": 10000.0}),
    ("epoch >= 3", Bound, {"field": "epoch", "op": ">=", "value": 3.0}),
    ("loss > 10 * min(loss)", Divergence, {"factor": 10.0, "strict": True}),
    ("train/loss >= 2.5*min(train/loss)", Divergence, {"factor": 2.5, "strict": False}),
    ("no metric for 30 min", Silence, {"seconds": 1800.0}),
    ("no metric for 1.5 h", Silence, {"seconds": 5400.0}),
    ("No Metric For 90 s", Silence, {"seconds": 90.0}),
])
def test_every_rule_form_parses_into_what_it_says(text, kind, fields):
    spec = parse_rule(text)
    assert type(spec) is kind and spec.text == text
    assert {k: getattr(spec, k) for k in fields} == fields


@pytest.mark.parametrize("text, phase, name, matches", [
    ("loss", "test", "loss", True),  # a bare name: any phase
    ("train/loss", "test", "loss", False),
    ("val/accuracy", "val", "accuracy", True),
    ("val_accuracy", "val", "accuracy", True),  # Keras' name, as parsers file it
    ("val_accuracy", "train", "val_accuracy", True),  # ... or as a parser that kept it whole
    ("region16/avg_iou", "train", "region16/avg_iou", True),  # darknet's names hold a slash
])
def test_a_selector_is_a_name_or_phase_slash_name(text, phase, name, matches):
    spec = parse_rule(f"{text} is nan")
    assert spec.selector.matches(phase, name) is matches


BAD = [
    ("loss >= x", "column 9: expected a number, got 'x'"),
    ("", "column 1: empty rule (e.g. 'loss is nan', 'val/accuracy no improvement in 5 evals')"),
    ("loss", "column 5: expected a comparison (>=, >, <=, <, ==, !=), 'is nan' or 'no improvement in N evals', "
             "got the end of the rule"),
    ("loss is big", "column 9: expected nan, inf or not finite, got 'big'"),
    ("loss is not big", "column 13: expected 'finite' (is not finite), got 'big'"),
    ("loss $ 3", "column 6: unexpected character '$'"),
    ("3 > loss", "column 1: expected a metric name, iteration, epoch or 'no metric for', got '3'"),
    ("loss > 1 extra", "column 10: unexpected 'extra' after the rule"),
    ("iteration < 5", "column 11: expected >= or > (iteration only bounds the run from above), got '<'"),
    ("epoch >= three", "column 10: expected a number, got 'three'"),
    ("no metric in 30 min", "column 11: expected 'for' (no metric for DURATION), got 'in'"),
    ("no loss for 30 min", "column 4: expected 'metric' (no metric for DURATION), got 'loss'"),
    ("no metric for 0 s", "column 15: the duration must be greater than 0"),
    ("no metric for 30", "column 17: expected a unit: s, min or h, got the end of the rule"),
    ("no metric for 30 days", "column 18: expected a unit: s, min or h, got 'days'"),
    ("loss no improvement in 2.5 evals", "column 24: the number of evals must be a whole number of at least 1"),
    ("loss no improvement in 0 evals", "column 24: the number of evals must be a whole number of at least 1"),
    ("loss no improvement in 5 epochs", "column 26: expected 'evals', got 'epochs'"),
    ("loss no change in 5 evals", "column 9: expected improvement, increase or decrease, got 'change'"),
    ("loss no improvement in 5 evals (best)", "column 33: expected max or min, got 'best'"),
    ("score no improvement in 5 evals", "column 1: cannot tell whether 'score' improves up or down: "
                                        "add (max) or (min) after 'evals'"),
    ("loss > 10 * min(acc)", "column 17: min() must name the rule's own metric 'loss', got 'acc'"),
    ("loss > 10 * max(loss)", "column 13: expected min(NAME), got 'max'"),
    ("loss < 10 * min(loss)", "column 6: a divergence rule reads NAME > K * min(NAME)"),
    ("loss > 10 * min(loss", "column 21: expected ')', got the end of the rule"),
    ("loss > 0 * min(loss)", "column 8: the factor must be greater than 0"),
]


@pytest.mark.parametrize("text, message", BAD)
def test_every_bad_rule_names_the_rule_and_the_column(text, message):
    with pytest.raises(ConfigError) as err:
        parse_rule(text)
    assert str(err.value) == f"--stop-when {text!r}: {message}"


def test_a_bad_rule_in_a_config_file_names_the_file_line_and_rule(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("command: [\"true\"]\nstop:\n  when:\n    - loss is nan\n    - loss >= x\n")
    with pytest.raises(ConfigError) as err:
        RunConfig.from_file(str(path))
    assert str(err.value) == f"{path}:3: stop.when: rule 'loss >= x': column 9: expected a number, got 'x'"


def test_rules_from_a_config_file_and_the_flag(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[stop]\nwhen = ["loss is nan", "no metric for 30 min"]\n')
    assert RunConfig.from_file(str(path)).stop.when == ("loss is nan", "no metric for 30 min")


def test_a_bad_rule_on_the_command_line_exits_2_and_the_child_never_starts(tmp_path):
    started = tmp_path / "started"
    proc = subprocess.run([sys.executable, "-m", "trainvisor", "run", "--run-dir", str(tmp_path / "run"),
                           "--stop-when", "loss is nan", "--stop-when", "val/accuracy no improvement in five evals",
                           "--", "sh", "-c", f"touch {started}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == ("trainvisor: --stop-when: stop.when: rule 'val/accuracy no improvement in five evals': "
                           "column 32: expected a whole number of evals, got 'five'\n")
    assert not started.exists() and not (tmp_path / "run").exists()
