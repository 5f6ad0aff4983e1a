"""The stop rules' small language: one rule per string, tokenized and parsed into a frozen spec.

    loss is nan                              a value is nan (also: is inf, is not finite)
    test/accuracy >= 0.98                    a threshold (>=, >, <=, <, ==, !=)
    val/accuracy no improvement in 5 evals   a plateau (mode from the name; `(max)`/`(min)` says it)
    loss > 10 * min(loss)                    divergence: above K times the lowest value so far
    iteration >= 10000   epoch >= 3          bounds on the records' iteration / epoch
    no metric for 30 min                     a hung training (s, min, h)

Parsed when the configuration is loaded, so a bad rule is one line naming the rule and the
column (1-based) before the training starts, not a surprise ten hours in.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import NoReturn, Optional, Union

from ..errors import ConfigError

__all__ = ["Selector", "Threshold", "NotFinite", "Plateau", "Divergence", "Bound", "Silence", "RuleSpec",
           "parse_rule", "rule_problem", "PHASES", "COMPARISONS"]

PHASES = ("train", "val", "test")
COMPARISONS = (">=", "<=", "==", "!=", ">", "<")
_UNITS = {"s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0, "m": 60.0, "min": 60.0,
          "mins": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0, "hour": 3600.0, "hours": 3600.0}
# Names whose better values are higher / lower (substring match on the metric's name, lowercased).
_MAXIMISED = ("acc", "precision", "recall", "f1", "map", "auc", "iou", "bleu", "rouge", "top1", "top5", "top-")
_MINIMISED = ("loss", "error", "err", "perplexity", "ppl", "wer", "cer", "mae", "mse", "rmse")

# A name starts with a letter or _ and may hold the characters parsers put in names
# (`region16/.5r`, `accuracy_top-1`, `loss1/loss`).
_TOKEN = re.compile(r"""
    (?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
  | (?P<word>[A-Za-z_][A-Za-z0-9_./@#-]*)
  | (?P<op>>=|<=|==|!=|>|<|\*|\(|\))
  | (?P<space>\s+)
""", re.VERBOSE)


@dataclass(frozen=True)
class Selector:
    """Which metrics a rule reads: `name` (any phase) or `phase/name`. `val_x` / `test_x` also
    match phase val / test `x`, which is how parsers file Keras' `val_accuracy`."""

    text: str
    keys: tuple[tuple[Optional[str], str], ...]

    def matches(self, phase: str, name: str) -> bool:
        for p, n in self.keys:  # a loop, not any(): called for every metric a rule reads
            if n == name and (p is None or p == phase):
                return True
        return False


@dataclass(frozen=True)
class Threshold:
    text: str
    selector: Selector
    op: str
    value: float


@dataclass(frozen=True)
class NotFinite:
    text: str
    selector: Selector
    kind: str  # "nan", "inf" or "not finite"


@dataclass(frozen=True)
class Plateau:
    text: str
    selector: Selector
    evals: int
    maximise: bool


@dataclass(frozen=True)
class Divergence:
    text: str
    selector: Selector
    factor: float
    strict: bool  # `>` (True) or `>=`


@dataclass(frozen=True)
class Bound:
    text: str
    field: str  # "iteration" or "epoch"
    op: str  # ">=" or ">"
    value: float


@dataclass(frozen=True)
class Silence:
    text: str
    seconds: float


RuleSpec = Union[Threshold, NotFinite, Plateau, Divergence, Bound, Silence]


class _Tokens:
    """The rule's tokens with their columns; `fail` raises the one-line error at a column."""

    def __init__(self, text: str, setting: str) -> None:
        self.text, self.setting = text, setting
        self.items: list[tuple[str, str, int]] = []  # (kind, text, column)
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                self.fail(pos + 1, f"unexpected character {text[pos]!r}")
            if m.lastgroup != "space":
                self.items.append((m.lastgroup, m.group(), pos + 1))
            pos = m.end()
        self.i = 0

    def fail(self, column: int, message: str) -> NoReturn:
        raise ConfigError(f"{self.setting} {self.text!r}: column {column}: {message}")

    def peek(self) -> tuple[str, str, int]:
        return self.items[self.i] if self.i < len(self.items) else ("end", "", len(self.text) + 1)

    def take(self) -> tuple[str, str, int]:
        tok = self.peek()
        self.i += 1
        return tok

    def word(self, *words: str, expected: str) -> str:
        kind, text, col = self.take()
        if kind != "word" or text.lower() not in words:
            self.fail(col, f"expected {expected}" + _got(kind, text))
        return text.lower()

    def number(self, expected: str = "a number") -> float:
        kind, text, col = self.take()
        value = float(text) if kind == "num" else math.nan
        if kind != "num" or not math.isfinite(value):
            self.fail(col, f"expected {expected}" + _got(kind, text))
        return value

    def end(self) -> None:
        kind, text, col = self.peek()
        if kind != "end":
            self.fail(col, f"unexpected {text!r} after the rule")


def _got(kind: str, text: str) -> str:
    return ", got the end of the rule" if kind == "end" else f", got {text!r}"


def parse_rule(text: str, *, setting: str = "--stop-when") -> RuleSpec:
    """One rule -> its spec; ConfigError `SETTING 'RULE': column N: what is wrong`."""
    toks = _Tokens(text.strip(), setting)
    kind, first, col = toks.peek()
    if kind == "end":
        toks.fail(1, "empty rule (e.g. 'loss is nan', 'val/accuracy no improvement in 5 evals')")
    if kind != "word":
        toks.fail(col, "expected a metric name, iteration, epoch or 'no metric for'" + _got(kind, first))
    if first.lower() == "no":
        spec: RuleSpec = _silence(toks)
    elif first.lower() in ("iteration", "epoch"):
        spec = _bound(toks)
    else:
        spec = _metric_rule(toks)
    toks.end()
    return spec


def rule_problem(text: object, *, setting: str = "--stop-when") -> Optional[str]:
    """The config check's form: None, or the one-line message."""
    if not isinstance(text, str):
        return f"{setting}: a rule must be a string, got {type(text).__name__}"
    try:
        parse_rule(text, setting=setting)
    except ConfigError as exc:
        return str(exc)
    return None


def _silence(toks: _Tokens) -> Silence:
    toks.take()
    toks.word("metric", "metrics", expected="'metric' (no metric for DURATION)")
    toks.word("for", expected="'for' (no metric for DURATION)")
    col = toks.peek()[2]
    amount = toks.number("a duration (e.g. 30 min)")
    if amount <= 0:
        toks.fail(col, "the duration must be greater than 0")
    unit = toks.word(*_UNITS, expected="a unit: s, min or h")
    return Silence(toks.text, amount * _UNITS[unit])


def _bound(toks: _Tokens) -> Bound:
    field = toks.take()[1].lower()
    kind, op, col = toks.take()
    if op not in (">=", ">"):
        toks.fail(col, f"expected >= or > ({field} only bounds the run from above)" + _got(kind, op))
    return Bound(toks.text, field, op, toks.number())


def _metric_rule(toks: _Tokens) -> RuleSpec:
    selector = _selector(toks.take()[1])
    kind, text, col = toks.take()
    if kind == "op" and text in COMPARISONS:
        value = toks.number()
        if toks.peek()[1] == "*":
            return _divergence(toks, selector, text, value, col)
        return Threshold(toks.text, selector, text, value)
    if kind == "word" and text.lower() == "is":
        return _not_finite(toks, selector)
    if kind == "word" and text.lower() == "no":
        return _plateau(toks, selector)
    toks.fail(col, "expected a comparison (>=, >, <=, <, ==, !=), 'is nan' or 'no improvement in N evals'"
              + _got(kind, text))


def _not_finite(toks: _Tokens, selector: Selector) -> NotFinite:
    word = toks.word("nan", "inf", "not", expected="nan, inf or not finite")
    if word == "not":
        toks.word("finite", expected="'finite' (is not finite)")
        word = "not finite"
    return NotFinite(toks.text, selector, word)


def _plateau(toks: _Tokens, selector: Selector) -> Plateau:
    how = toks.word("improvement", "increase", "decrease", expected="improvement, increase or decrease")
    toks.word("in", expected="'in' (no improvement in N evals)")
    col = toks.peek()[2]
    n = toks.number("a whole number of evals")
    if n < 1 or n != int(n):
        toks.fail(col, "the number of evals must be a whole number of at least 1")
    toks.word("evals", "eval", "evaluations", expected="'evals'")
    maximise: Optional[bool] = {"increase": True, "decrease": False}.get(how)
    if toks.peek()[1] == "(":
        toks.take()
        maximise = toks.word("max", "min", expected="max or min") == "max"
        if toks.take()[1] != ")":
            toks.fail(toks.items[toks.i - 1][2], "expected ')'")
    if maximise is None:
        maximise = _improves_upwards(selector)
        if maximise is None:
            toks.fail(1, f"cannot tell whether {selector.text!r} improves up or down: "
                         "add (max) or (min) after 'evals'")
    return Plateau(toks.text, selector, int(n), bool(maximise))


def _divergence(toks: _Tokens, selector: Selector, op: str, factor: float, op_col: int) -> Divergence:
    if op not in (">", ">="):
        toks.fail(op_col, "a divergence rule reads NAME > K * min(NAME)")
    toks.take()  # "*"
    toks.word("min", expected="min(NAME)")
    kind, text, col = toks.take()
    if text != "(":
        toks.fail(col, "expected '(' after min" + _got(kind, text))
    kind, name, col = toks.take()
    if kind != "word" or name != selector.text:
        toks.fail(col, f"min() must name the rule's own metric {selector.text!r}" + _got(kind, name))
    kind, text, col = toks.take()
    if text != ")":
        toks.fail(col, "expected ')'" + _got(kind, text))
    if factor <= 0:
        toks.fail(op_col + len(op) + 1, "the factor must be greater than 0")
    return Divergence(toks.text, selector, factor, op == ">")


def _selector(text: str) -> Selector:
    phase, slash, rest = text.partition("/")
    if slash and phase in PHASES and rest:
        return Selector(text, ((phase, rest),))
    for p in ("val", "test"):
        if text.startswith(p + "_") and len(text) > len(p) + 1:
            return Selector(text, ((None, text), (p, text[len(p) + 1:])))
    return Selector(text, ((None, text),))


def _improves_upwards(selector: Selector) -> Optional[bool]:
    name = selector.keys[-1][1].lower()
    if any(w in name for w in _MINIMISED):
        return False
    if any(w in name for w in _MAXIMISED):
        return True
    return None
