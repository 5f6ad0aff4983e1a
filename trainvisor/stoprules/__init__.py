"""Stop rules: a small language for when trainvisor stops the training itself (`loss is nan`,
`val/accuracy no improvement in 5 evals`, `no metric for 30 min`, ...), checked when the
configuration is loaded and evaluated on the metric stream as it is parsed.

grammar.py (rule text -> frozen spec, one-line errors with the column), rules.py (each rule's
state machine), engine.py (the rule set, `Firing`, the inline sink a run uses)."""
from .engine import Firing, StopRules, StopRuleSink
from .grammar import parse_rule

__all__ = ["Firing", "StopRules", "StopRuleSink", "parse_rule"]
