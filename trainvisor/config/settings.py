"""How a configuration value is declared: its default, its one-line help, its check, and whether
it is a secret. The schema (`schema.py`) is written with `setting(...)`; loading, printing and
the CLI's flags all read these declarations, so a value is described in one place only."""
from __future__ import annotations

import math
from dataclasses import Field, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

__all__ = ["setting", "upload_policy", "byte_rate", "rank_selection", "Check", "positive", "non_negative",
           "finite_non_negative", "one_of", "at_least", "help_of", "is_secret", "check_of", "stop_rules", "shows_value",
           "resume_template", "best_by_metric", "destination_list"]

Check = Callable[[Any], Optional[str]]
"""Returns None when the value is fine, else what is wrong ("must be greater than 0")."""


def setting(default: Any, *, help: str, check: Optional[Check] = None, secret: bool = False,
            shows_value: bool = False) -> Any:
    """A dataclass field with the metadata the loader, the printer and the CLI use. `shows_value`:
    the check's message quotes the faulty part itself (no "(got ...)" of the whole value)."""
    metadata = {"help": help, "check": check, "secret": secret, "shows_value": shows_value}
    if isinstance(default, Mapping):  # a read-only mapping is still unhashable: one fresh copy per instance
        frozen = dict(default)
        return field(default_factory=lambda: MappingProxyType(dict(frozen)), metadata=metadata)
    return field(default=default, metadata=metadata)


def help_of(f: Field) -> str:
    return f.metadata.get("help", "")


def is_secret(f: Field) -> bool:
    return bool(f.metadata.get("secret", False))


def shows_value(f: Field) -> bool:
    return bool(f.metadata.get("shows_value", False))


def check_of(f: Field) -> Optional[Check]:
    return f.metadata.get("check")


def positive(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    return None if value > 0 else "must be greater than 0"


def non_negative(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    return None if value >= 0 else "must not be negative"


finite_non_negative = non_negative
"""Timeouts: nan would never fire and inf never end a wait; both are refused like negatives."""


def share(value: Any) -> Optional[str]:
    """A fraction in (0, 1]: 1 is all of it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        return "must be a number above 0 and at most 1"
    return None


def at_least(low: int, high: Optional[int] = None) -> Check:
    def check(value: Any) -> Optional[str]:
        if value is None or (value >= low and (high is None or value <= high)):
            return None
        return f"must be between {low} and {high}" if high is not None else f"must be at least {low}"

    return check


def one_of(*choices: str) -> Check:
    def check(value: Any) -> Optional[str]:
        if value is None or value in choices:
            return None
        return "must be one of " + ", ".join(choices)

    return check


def byte_rate(value: Any) -> Optional[str]:
    """`50MB/s` and the like (uploaders/ratelimit.py reads it; a deferred import, as for a policy)."""
    if value == "0":  # unlimited, the default: checked without loading the uploaders package
        return None
    from ..uploaders.ratelimit import RATE_FORMAT, parse_rate

    try:
        parse_rate(value)
    except ValueError:
        return f"must be {RATE_FORMAT}"
    return None


def upload_policy(value: Any) -> Optional[str]:
    if value in ("all", "epoch-end", "last"):  # the usual words, without loading the policy module
        return None
    from ..errors import ConfigError
    from ..watch.policy import parse_policy

    try:
        parse_policy(value)
    except ConfigError:
        return "must be all, epoch-end, every-N (e.g. every-5) or last"
    return None



def rank_selection(value: Any) -> Optional[str]:
    """`parsing.ranks`: checked where it is written, by the parser the run will use."""
    if isinstance(value, str) and value in ("0", "all"):  # the usual two, without loading the rank router
        return None
    from ..stream.ranks import SELECTION_FORMS, parse_rank_selection

    try:
        parse_rank_selection(value)
    except ValueError:
        return SELECTION_FORMS
    return None


def stop_rules(value: Any) -> Optional[str]:
    """`stop.when`: each rule parsed where it is written; the message names the rule and the column."""
    if not value:
        return None  # most runs have none: the grammar is not even imported
    from ..stoprules.grammar import rule_problem

    for rule in value or ():
        problem = rule_problem(rule, setting="rule")
        if problem:
            return problem
    return None


def resume_template(value: Any) -> Optional[str]:
    """`restart.resume_arg`: its fields are {latest}, {latest.EXT} and {latest_dir}; anything else
    is an error where it is written, not at the first restart."""
    if value is None:
        return None
    import string

    try:
        names = [f for _text, f, _spec, _conv in string.Formatter().parse(value) if f is not None]
    except ValueError as exc:
        return f"is not a template: {exc}"
    for name in names:
        if name != "latest_dir" and name.split(".", 1)[0] != "latest":
            return f"has an unknown field {{{name}}} (use {{latest}}, {{latest.EXT}} or {{latest_dir}})"
    return None


def best_by_metric(value: Any) -> Optional[str]:
    """`upload.best_by`: 'METRIC max|min', checked by retention's own reader."""
    if value is None:
        return None
    from ..uploaders.retention import best_by_problem

    return best_by_problem(value)


def destination_list(value: Any) -> Optional[str]:
    """`upload.to` as a list: each a URL, none twice (two managers would share one store's keys
    and journal each other's uploads)."""
    if value is None or isinstance(value, str):
        return None
    seen: set[str] = set()
    for url in value:
        if not url.strip():
            return "each destination must be a URL, not empty"
        if url.rstrip("/") in seen:
            from ..secrets import mask_url

            return f"lists {mask_url(url)} twice"
        seen.add(url.rstrip("/"))
    return None


def globs(value: Any) -> Optional[str]:
    """`watch.follow`: each a file pattern; an empty one would follow nothing, silently."""
    for pattern in value or ():
        if not str(pattern).strip():
            return "each must be a file pattern (GLOB), not empty"
    return None
