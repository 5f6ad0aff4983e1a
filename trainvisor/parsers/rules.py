"""User rules: a YAML or TOML file of regexes that add metrics to, or replace, the built-in parser.

    mode: add            # add (default): run with the chosen parser; replace: rules only
    timeout: 0.05        # seconds one match may take (default 0.05)
    rules:
      - name: ner_loss
        contains: "NER loss"                  # literal prefilter: the regex runs only on such lines
        pattern: 'step:(?P<step>\\d+)/\\d+, NER loss:(?P<value>\\S+)'
        metric: ner_loss                      # default: the rule's name
        phase: train                          # train (default), val or test
      - name: eval
        pattern: 'eval acc (?P<accuracy>\\S+) f1 (?P<f1>\\S+)'   # other named groups are metrics
        phase: val

Groups: ``value`` (with the metric name from a ``name`` group, else ``metric``,
else the rule's name), ``step``, ``epoch``, and any other named group as a
metric of that name. A rule takes every match on a line (``a=1 b=2`` with
``(?P<name>\\w+)=(?P<value>\\d+)`` gives ``a`` and ``b``). Patterns use the
`regex` module and every match runs with a timeout: a pattern that backtracks
catastrophically is reported and disabled instead of stalling the supervisor.
"""
from __future__ import annotations

import logging
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import regex
import yaml

from ..defaults import SETTINGS_FILE_LIMIT
from ..errors import ParserError
from ..events import Event, LineBlock, Metric, PHASE_TEST, PHASE_TRAIN, PHASE_VAL
from .base import Parser
from .common import to_float

__all__ = ["Rule", "RuleSet", "RulesError", "RulesParser", "load_rules", "DEFAULT_TIMEOUT"]

log = logging.getLogger("trainvisor.parsers.rules")

DEFAULT_TIMEOUT = 0.05
_PHASES = (PHASE_TRAIN, PHASE_VAL, PHASE_TEST)
_INDEX_GROUPS = frozenset({"name", "value", "step", "epoch"})
_RULE_KEYS = frozenset({"name", "pattern", "contains", "metric", "phase"})
_TOP_KEYS = frozenset({"mode", "timeout", "rules"})


class RulesError(ParserError):
    """A rules file that cannot be used; the message names the file and the rule."""


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: "regex.Pattern"
    contains: str
    metric: Optional[str]
    phase: str
    fixed: tuple[str, ...]  # named groups that are metrics of their own


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    mode: str
    timeout: float
    source: str


def _read(path: Path) -> dict:
    where = str(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(SETTINGS_FILE_LIMIT + 1)
    except OSError as exc:
        raise RulesError(f"{where}: cannot read: {exc.strerror or exc}") from exc
    if len(raw) > SETTINGS_FILE_LIMIT:
        raise RulesError(f"{where}: larger than {SETTINGS_FILE_LIMIT >> 20} MiB; a rules file is a few rules "
                         "(is this the right file?)")
    try:
        if path.suffix.lower() == ".toml":
            data = tomllib.loads(raw.decode("utf-8"))
        else:
            data = yaml.safe_load(raw)
    except (tomllib.TOMLDecodeError, yaml.YAMLError, UnicodeDecodeError) as exc:
        kind = "TOML" if path.suffix.lower() == ".toml" else "YAML"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RulesError(f"{where}: not valid {kind}: {first}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list) or not data["rules"]:
        raise RulesError(f"{where}: expected a mapping with a non-empty 'rules' list")
    return data


def load_rules(path: str | Path) -> RuleSet:
    """Read and validate a rules file; every problem is a one-line `RulesError`."""
    path = Path(path)
    where = str(path)
    data = _read(path)
    for key in data:
        if key not in _TOP_KEYS:
            raise RulesError(f"{where}: unknown key {key!r} (expected mode, timeout, rules)")
    mode = data.get("mode", "add")
    if mode not in ("add", "replace"):
        raise RulesError(f"{where}: mode must be 'add' or 'replace' (got {mode!r})")
    timeout = data.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 10:
        raise RulesError(f"{where}: timeout must be a number of seconds in (0, 10] (got {timeout!r})")
    rules = []
    seen = set()
    for i, spec in enumerate(data["rules"], 1):
        rules.append(_rule(where, i, spec, seen))
    return RuleSet(tuple(rules), mode, float(timeout), where)


def _rule(where: str, index: int, spec, seen: set) -> Rule:
    if not isinstance(spec, dict):
        raise RulesError(f"{where}: rule #{index}: expected a mapping with name and pattern")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise RulesError(f"{where}: rule #{index}: needs a 'name'")
    label = f"{where}: rule {name!r}"
    if name in seen:
        raise RulesError(f"{label}: name used by an earlier rule")
    seen.add(name)
    for key in spec:
        if key not in _RULE_KEYS:
            raise RulesError(f"{label}: unknown key {key!r} (expected {', '.join(sorted(_RULE_KEYS))})")
    source = spec.get("pattern")
    if not isinstance(source, str) or not source:
        raise RulesError(f"{label}: needs a 'pattern'")
    try:
        pattern = regex.compile(source)
    except regex.error as exc:
        raise RulesError(f"{label}: pattern does not compile: {exc}") from exc
    groups = set(pattern.groupindex)
    fixed = tuple(g for g in pattern.groupindex if g not in _INDEX_GROUPS)
    if "name" in groups and "value" not in groups:
        raise RulesError(f"{label}: pattern has a (?P<name>...) group but no (?P<value>...) group")
    if "value" not in groups and not fixed:
        raise RulesError(f"{label}: pattern has no (?P<value>...) group and no fixed metric name")
    phase = spec.get("phase", PHASE_TRAIN)
    if phase not in _PHASES:
        raise RulesError(f"{label}: phase must be one of train, val, test (got {phase!r})")
    contains = spec.get("contains", "")
    if not isinstance(contains, str):
        raise RulesError(f"{label}: 'contains' must be a string")
    metric = spec.get("metric")
    if metric is not None and (not isinstance(metric, str) or not metric):
        raise RulesError(f"{label}: 'metric' must be a non-empty string")
    return Rule(name, pattern, contains, metric, phase, fixed)


class RulesParser:
    """Runs a `RuleSet` over every line, with (mode add) or instead of (mode replace) `base`."""

    name = "rules"
    description = "user regex rules (--rules FILE)"

    def __init__(self, ruleset: RuleSet, base: Optional[Parser] = None) -> None:
        self.ruleset = ruleset
        self.base = base if ruleset.mode == "add" else None
        self._active = list(ruleset.rules)
        self.timeouts: list[str] = []

    def feed(self, block: LineBlock) -> list[Event]:
        out = list(self.base.feed(block)) if self.base is not None else []
        if not self._active:
            return out
        own = self._scan(block)
        if own:
            if out:
                out.extend(own)
                out.sort(key=lambda e: e.line)
                return out
            return own
        return out

    def finish(self) -> list[Event]:
        return list(self.base.finish()) if self.base is not None else []

    def _scan(self, block: LineBlock) -> list[Event]:
        text = block.text
        rules = [r for r in self._active if not r.contains or r.contains in text]
        if not rules:
            return []
        out: list[Event] = []
        lines = text.split("\n")
        lines.pop()
        timeout = self.ruleset.timeout
        for offset, physical in enumerate(lines):
            for line in physical.split("\r") if "\r" in physical else (physical,):  # each state of a rewritten line
                for rule in rules:
                    if rule.contains and rule.contains not in line:
                        continue
                    try:  # every match on the line, as Katib and Guild take them
                        for m in rule.pattern.finditer(line, timeout=timeout):
                            out.extend(self._metrics(rule, m, block.first_line + offset, block.wall_time))
                    except TimeoutError:
                        self._disable(rule, block.first_line + offset)
                        rules = [r for r in rules if r is not rule]
        return out

    def _disable(self, rule: Rule, line: int) -> None:
        msg = (f"{self.ruleset.source}: rule {rule.name!r}: match took longer than "
               f"{self.ruleset.timeout:g} s on line {line}; rule disabled")
        self.timeouts.append(msg)
        log.warning("%s", msg)
        self._active = [r for r in self._active if r is not rule]

    @staticmethod
    def _metrics(rule: Rule, m, line: int, wall_time: float) -> list[Metric]:
        g = m.groupdict()
        step = epoch = None
        if g.get("step"):
            s = to_float(g["step"])
            step = int(s) if s is not None and s == s and abs(s) < 1e15 else None
        if g.get("epoch"):
            epoch = to_float(g["epoch"])
        out = []
        if "value" in g and g["value"] is not None:
            v = to_float(g["value"])
            name = g.get("name") or rule.metric or rule.name
            if v is not None:
                out.append(Metric(name, v, step, rule.phase, None, None, epoch, wall_time, line))
        for key in rule.fixed:
            raw = g.get(key)
            v = to_float(raw) if raw is not None else None
            if v is not None:
                out.append(Metric(key, v, step, rule.phase, None, None, epoch, wall_time, line))
        return out
