"""The choice ``auto`` makes, as pure functions: command line and first lines in, a `Choice` out.

No state and no clock: the same argv and lines always give the same choice, so a
live run and a replay of its log agree, and the rules are tested as a table
(tests/test_parsers_chooser.py). The inputs are the registry's public view
(`ParserInfo`); `AutoParser` only feeds these functions and acts on their answers.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Optional, Sequence

from . import ParserInfo

__all__ = ["Choice", "SignatureHit", "choose", "choose_by_argv", "candidates", "count_signatures", "first_signature",
           "WINDOW", "DECIDE_HITS", "FALLBACK", "AUTO"]

WINDOW = 500  # lines held before settling for the fallback
DECIDE_HITS = 2  # signature lines another format needs to overturn an early choice
FALLBACK = "generic"
AUTO = "auto"

# When scores tie, or several formats' signatures match one line, the more specific format wins.
PRIORITY = ("caffe", "mxnet", "detectron2", "mmdet", "tensorflow", "huggingface", "lightning",
            "darknet", "yolo", "keras", "pytorch")

ARGV_NAMES = {
    "caffe": "caffe", "caffe.bin": "caffe", "caffe.exe": "caffe", "caffe-d": "caffe",
    "darknet": "darknet", "darknet.exe": "darknet", "yolo": "yolo",
}

BY_COMMAND, BY_SIGNATURE, BY_FALLBACK = "command", "signature", "fallback"


@dataclass(frozen=True)
class Choice:
    """A parser chosen, why (for the run log), and on what `basis`: "command"
    (the command line names it), "signature" (its lines lead) or "fallback"
    (no known format yet)."""

    name: str
    reason: str
    basis: str


def choose_by_argv(argv: Sequence[str]) -> Optional[Choice]:
    """The parser that the command itself names (its first three words), if any."""
    for word in list(argv)[:3]:
        base = os.path.basename(word)
        if base in ARGV_NAMES:
            return Choice(ARGV_NAMES[base], f"command line names {base!r}", BY_COMMAND)
    return None


@lru_cache(maxsize=64)
def _compiled(signature: str) -> re.Pattern:
    return re.compile(signature, re.M)


def candidates(infos: Iterable[ParserInfo]) -> tuple[tuple[str, re.Pattern], ...]:
    """(name, compiled signature) of the parsers ``auto`` can choose by their lines, in priority order."""
    rank = {n: i for i, n in enumerate(PRIORITY)}
    usable = [i for i in infos if i.signature and i.name not in (AUTO, FALLBACK)]
    usable.sort(key=lambda i: rank.get(i.name, len(PRIORITY)))
    return tuple((i.name, _compiled(i.signature)) for i in usable)


def count_signatures(lines: Iterable[str], cands: Sequence[tuple[str, re.Pattern]]) -> dict[str, int]:
    """Signature matches per format over `lines`, in priority order (formats without any left out).

    A line is one program's: when several formats' signatures match it, it counts for the first
    of them in priority order only, the one `first_signature` names for it (TensorFlow's logger
    printing BERT's ``***** Running training *****`` is no Hugging Face line)."""
    counts = dict.fromkeys((n for n, _ in cands), 0)
    for line in lines:
        for name, pat in cands:
            n = len(pat.findall(line))
            if n:
                counts[name] += n
                break
    return {n: c for n, c in counts.items() if c}


def choose(argv: Sequence[str], first_lines: Sequence[str], infos: Sequence[ParserInfo], *,
           final: bool = False) -> Optional[Choice]:
    """The parser for a run whose command is `argv` and whose output began with `first_lines`.

    The command line decides when it names a framework. Otherwise the format whose
    signature lines lead wins once it has more than twice the next one's (ties go
    to the more specific format); at the end of the stream (`final`) any lead
    wins. With no clear leader by `WINDOW` lines, or none at the end, the fallback.
    None: not decided yet, show me more lines.
    """
    by_argv = choose_by_argv(argv)
    if by_argv is not None:
        return by_argv
    n = len(first_lines)
    ranked = sorted(count_signatures(first_lines, candidates(infos)).items(), key=lambda kv: -kv[1])
    if ranked:
        (name, top), second = ranked[0], (ranked[1][1] if len(ranked) > 1 else 0)
        if final or top > 2 * second:
            others = ", ".join(f"{o} {s}" for o, s in ranked[1:4])
            return Choice(name, f"{top} {name} signature lines in the first {n} lines"
                          + (f" (others: {others})" if others else ""), BY_SIGNATURE)
    if final or n >= WINDOW:
        return Choice(FALLBACK, f"no known format in the first {n} lines", BY_FALLBACK)
    return None


@dataclass(frozen=True)
class SignatureHit:
    """The first line of a text that carries a signature: its index in the text,
    the format it signs (first in priority order when several do) and the text matched."""

    line_index: int
    name: str
    excerpt: str


@lru_cache(maxsize=16)
def _any_of(patterns: tuple[str, ...]) -> re.Pattern:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.M)


def first_signature(text: str, cands: Sequence[tuple[str, re.Pattern]]) -> Optional[SignatureHit]:
    """Where a format first shows up in `text` (lines ending in newlines); None if nowhere."""
    if not cands:
        return None
    m = _any_of(tuple(p.pattern for _, p in cands)).search(text)
    if m is None:
        return None
    line_start = text.rfind("\n", 0, m.start()) + 1
    line_end = text.find("\n", m.start()) + 1 or len(text)
    name = next(n for n, pat in cands if pat.search(text, line_start, line_end))
    return SignatureHit(text.count("\n", 0, m.start()), name, m.group(0))
