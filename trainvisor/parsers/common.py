"""Shared pieces of the format parsers: number syntax, value conversion, name tables.

Every framework prints numbers its own way: ``-nan`` (darknet), ``4.1066e-005``
(Windows C runtimes), ``1.#QNAN``, quoted strings (TRL). One number pattern and
one converter keep them consistent across parsers, and NaN/inf stay metrics: a
NaN loss is the event people most need to see.
"""
from __future__ import annotations

import math
import re
from typing import Iterator, Optional

from ..events import PHASE_TEST, PHASE_TRAIN, PHASE_VAL, Metric

__all__ = [
    "NUMBER",
    "to_float",
    "as_float",
    "fnum",
    "NameTable",
    "split_phase",
    "pairs",
    "PAIR_RE",
    "metrics_from_pairs",
]

# A number as training logs print it. Windows' ``1.#INF`` / ``1.#QNAN`` / ``-1.#IND``
# come before the plain decimal so the decimal does not stop at ``1.``.
NUMBER = (
    r"[-+]?(?:\d+\.#(?:INF|QNAN|SNAN|IND)\w*"
    r"|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
    r"|[nN][aA][nN]|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?)"
)

_SPECIAL = {"inf": math.inf, "infinity": math.inf, "nan": math.nan}


def to_float(text: str) -> Optional[float]:
    """`text` as a float, or None when it is not a number. ``-nan`` is NaN."""
    try:
        return float(text)
    except ValueError:
        pass
    t = text.strip().strip("'\"").lower()
    sign = -1.0 if t.startswith("-") else 1.0
    t = t.lstrip("+-")
    if "#" in t:  # MSVC runtime spellings
        return sign * math.inf if "#inf" in t else math.nan
    if t in _SPECIAL:
        return sign * _SPECIAL[t] if t != "nan" else math.nan
    try:
        return float(t) * sign
    except ValueError:
        return None


def as_float(v: int | float) -> Optional[float]:
    """A JSON number as a float; None for an integer too large for one."""
    try:
        return float(v)
    except OverflowError:
        return None


def fnum(i: int) -> float:
    """An integer parsed from a log as a float (an epoch); inf when too large for one."""
    try:
        return float(i)
    except OverflowError:
        return math.inf


# A phase word before or after the name, joined by a space, ``_``, ``/``, ``.`` or ``-``.
_PHASE_WORDS = {"train": PHASE_TRAIN, "training": PHASE_TRAIN, "val": PHASE_VAL, "valid": PHASE_VAL,
                "validation": PHASE_VAL, "dev": PHASE_VAL, "eval": PHASE_VAL, "test": PHASE_TEST}
_WORDS = "|".join(_PHASE_WORDS)
_PHASE_RE = re.compile(rf"^({_WORDS})[ _/.-](.+)$|^(.+?)[ _/.-]({_WORDS})$", re.I)


def split_phase(key: str) -> Optional[tuple[str, str]]:
    """(name, phase) when `key` carries a phase word as a prefix or suffix
    (``Train Loss``, ``val_loss``, ``eval/accuracy``, ``test-acc``, ``Dev F1-macro``,
    ``acc/train``); the name keeps what is left, as printed. None otherwise."""
    m = _PHASE_RE.match(key)
    if m is None:
        return None
    if m.group(1):
        return m.group(2), _PHASE_WORDS[m.group(1).lower()]
    return m.group(3), _PHASE_WORDS[m.group(4).lower()]


class NameTable:
    """Raw metric key -> (name, phase), memoised with a bound.

    The parser's own `val_prefixes` first (``Validation-``), then the shared
    phase-word rule (`split_phase`), so every parser that reads ``key: value``
    pairs names phases the same way; keys starting with a `keep_prefixes` entry
    are names of their own (the HF Trainer's end-of-training ``train_loss`` is an
    average over the run, not one more training loss).

    Logs with thousands of distinct metric names (per-class APs) must not grow
    memory without limit; when full the table is simply cleared.
    """

    def __init__(self, *, limit: int = 4096, val_prefixes: tuple[str, ...] = ("val_", "eval_"),
                 keep_prefixes: tuple[str, ...] = ()) -> None:
        self._map: dict[str, tuple[str, str]] = {}
        self._limit = limit
        self._prefixes = val_prefixes
        self._keep = keep_prefixes

    def __call__(self, key: str) -> tuple[str, str]:
        hit = self._map.get(key)
        if hit is None:
            if len(self._map) >= self._limit:
                self._map.clear()
            hit = None
            for p in self._prefixes:
                if key.startswith(p) and len(key) > len(p):
                    hit = (key[len(p):], PHASE_VAL)
                    break
            if hit is None:
                hit = (None if key.startswith(self._keep) else split_phase(key)) or (key, PHASE_TRAIN)
            self._map[key] = hit
        return hit

    def __len__(self) -> int:
        return len(self._map)


# ``name: value`` or ``name=value``; the name is a word that may carry
# ``/ . - @`` (``mAP@.5``, ``loss/total``) but starts with a letter or ``_``.
PAIR_RE = re.compile(r"(?<![\w.@/-])([A-Za-z_][\w./@-]*?)\s*[:=]\s*(" + NUMBER + r")(?![\w.])")


def pairs(text: str) -> Iterator[tuple[str, float]]:
    """Every ``name: number`` / ``name=number`` of a line, in order."""
    for m in PAIR_RE.finditer(text):
        v = to_float(m.group(2))
        if v is not None:
            yield m.group(1), v


def metrics_from_pairs(
    items,
    names: NameTable,
    *,
    iteration: Optional[int],
    epoch: Optional[float],
    seconds: Optional[float],
    wall_time: float,
    line: int,
    skip: frozenset = frozenset(),
    phase: Optional[str] = None,
) -> list[Metric]:
    """One Metric per (key, value); a value may still be the raw text, and one that
    is no number (or a key in `skip`) yields nothing."""
    out = []
    for key, value in items:
        if key in skip:
            continue
        if isinstance(value, str):
            value = to_float(value)
            if value is None:
                continue
        name, ph = names(key)
        out.append(Metric(name, value, iteration, phase or ph, None, seconds, epoch, wall_time, line))
    return out
