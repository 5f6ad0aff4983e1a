"""``auto``: choose the parser from the command line, else from the first lines of output.

Deterministic for replay: the choice depends on line counts, never on time.
Each parser has a `signature` (a regex over lines only its format prints).
Lines are held until a signature line appears; the format that leads then is
chosen and the held blocks are fed to it, so nothing is lost and a live run's
metrics are not delayed past the first signature line. Until `WINDOW` lines
have gone by the choice stays open: if another format clearly outnumbers it,
`auto` switches once. With no signature in the window, ``generic`` parses
meanwhile and `auto` switches once, to the first format that shows up later.
Once final, `feed` *is* the chosen parser's `feed` (an instance attribute), so
`auto` costs nothing per block from then on.
"""
from __future__ import annotations

import logging
import os
import re
from typing import ClassVar, Optional, Sequence

from ..events import Event
from ..lines import LineBlock
from . import _REGISTRY, _load_builtins, create_parser, register_parser
from .base import Parser, ParserOptions

__all__ = ["AutoParser", "choose_by_argv", "WINDOW"]

log = logging.getLogger("trainvisor.parsers.auto")

WINDOW = 500  # lines held before settling for the fallback
DECIDE_HITS = 2
FALLBACK = "generic"

# Signatures of parsers that do not declare one themselves.
_EXTRA_SIGNATURES = {
    # glog lines only: the Caffe parser reads nothing else
    "caffe": r"^[IWEF]\d{4} [\d:.]+ +\d+ (?:solver|caffe|net|sgd_solver|layer_factory)\.(?:cpp|hpp):\d+\]",
}
# When scores tie, the more specific format wins.
_PRIORITY = ("caffe", "mxnet", "detectron2", "mmdet", "tensorflow", "huggingface", "lightning",
             "darknet", "yolo", "keras", "pytorch")

_ARGV_NAMES = {
    "caffe": "caffe", "caffe.bin": "caffe", "caffe.exe": "caffe", "caffe-d": "caffe",
    "darknet": "darknet", "darknet.exe": "darknet", "yolo": "yolo",
}


def choose_by_argv(argv: Sequence[str]) -> Optional[tuple[str, str]]:
    """(parser name, reason) when the command itself names its framework."""
    for word in list(argv)[:3]:
        base = os.path.basename(word)
        if base in _ARGV_NAMES:
            return _ARGV_NAMES[base], f"command line names {base!r}"
    return None


def _signatures() -> list[tuple[str, re.Pattern]]:
    _load_builtins()
    out = []
    for name in sorted(_REGISTRY, key=lambda n: _PRIORITY.index(n) if n in _PRIORITY else len(_PRIORITY)):
        if name in ("auto", FALLBACK):
            continue
        sig = getattr(_REGISTRY[name], "signature", None) or _EXTRA_SIGNATURES.get(name)
        if sig:
            out.append((name, re.compile(sig, re.M)))
    return out


def _lines_of(block: LineBlock):
    """The block's lines as one-line blocks."""
    texts = block.text.split("\n")
    texts.pop()
    cut = block.truncated
    for i, text in enumerate(texts):
        n = block.first_line + i
        yield LineBlock(text + "\n", block.stream, n, 1, block.time, block.wall_time, (n,) if n in cut else ())


def _slice(block: LineBlock, start: int, end: Optional[int] = None) -> LineBlock:
    """Lines [start, end) of a block, as a block."""
    lines = block.text.split("\n")[:-1][start:end]
    first = block.first_line + start
    last = first + len(lines)
    cut = tuple(n for n in block.truncated if first <= n < last)
    return LineBlock("".join(t + "\n" for t in lines), block.stream, first, len(lines), block.time,
                     block.wall_time, cut)


@register_parser
class AutoParser:
    name: ClassVar[str] = "auto"
    description: ClassVar[str] = "choose the parser from the command line or the first lines of output (default)"

    def __init__(self, options: ParserOptions | None = None) -> None:
        self.options = options or ParserOptions()
        self.chosen: Optional[str] = None
        self.reason = ""
        self.switched = False
        self._held: list[LineBlock] = []
        self._held_lines = 0
        self._scores: dict[str, int] = {}
        self._sigs = _signatures()
        self._any: Optional[re.Pattern] = None
        self._delegate: Optional[Parser] = None
        self._confirming = False  # chosen by signature, window not over: may switch once
        self._final = False  # the choice is made for good
        self._since: dict[str, int] = {}  # signature counts since the choice
        self._retained: list[LineBlock] = []  # lines since the choice, while it may change
        self._first_seen: dict[str, int] = {}  # format -> index in _retained of its first signature
        self._emitted: set[int] = set()  # retained lines the chosen parser made events from
        by_argv = choose_by_argv(self.options.argv)
        if by_argv is not None:
            self._settle(*by_argv)

    # Replaced by the chosen parser's bound methods once the choice is final.
    def feed(self, block: LineBlock) -> list[Event]:
        if self._final:  # only reached by a caller that kept a reference to this method
            return self._delegate.feed(block)  # type: ignore[union-attr]
        if self._delegate is not None and not self._confirming:
            return self._watch(block)
        # Undecided: go line by line, so that the choice (and which parser gets
        # which line) never depends on where the blocks happen to end -- a live
        # run's blocks are small, a replay's large, and both must agree.
        out: list[Event] = []
        for i, line in enumerate(_lines_of(block)):
            if self._final:
                out.extend(self._delegate.feed(_slice(block, i)))  # type: ignore[union-attr]
                break
            if self._delegate is not None and not self._confirming:
                out.extend(self._watch(_slice(block, i)))
                break
            out.extend(self._confirm(line) if self._confirming else self._hold(line))
        return out

    def _hold(self, block: LineBlock) -> list[Event]:
        self._held.append(block)
        self._held_lines += block.count
        self._count(block.text, self._scores)
        best = self._best()
        if best is not None:
            out = self._release(*best)
            if self._held_lines < WINDOW:
                self._open_for_confirmation()
            return out
        if self._held_lines >= WINDOW:
            return self._fallback()
        return []

    def finish(self) -> list[Event]:
        if self._confirming:
            self._confirming = False
        if self._delegate is None:
            best = self._best(final=True)
            out = self._release(*best) if best is not None else self._fallback()
            return out + self._delegate.finish()
        return self._delegate.finish()

    # -- internals ---------------------------------------------------------

    def _count(self, text: str, into: dict[str, int]) -> None:
        for name, pat in self._sigs:
            n = len(pat.findall(text))
            if n:
                into[name] = into.get(name, 0) + n

    def _best(self, *, final: bool = False) -> Optional[tuple[str, str]]:
        if not self._scores:
            return None
        ranked = sorted(self._scores.items(), key=lambda kv: -kv[1])  # stable: priority order kept on ties
        (name, top), second = ranked[0], (ranked[1][1] if len(ranked) > 1 else 0)
        if final or top > 2 * second:
            others = ", ".join(f"{n} {s}" for n, s in ranked[1:4])
            return name, (f"{top} {name} signature lines in the first {self._held_lines} lines"
                          + (f" (others: {others})" if others else ""))
        return None

    def _release(self, name: str, reason: str) -> list[Event]:
        self._settle(name, reason)
        held, self._held = self._held, []
        out: list[Event] = []
        for block in held:
            out.extend(self._delegate.feed(block))  # type: ignore[union-attr]
        return out

    def _open_for_confirmation(self) -> None:
        """Chosen early: watch the rest of the window for a clearly better format."""
        self._confirming = True
        self._final = False
        del self.feed

    def _confirm(self, block: LineBlock) -> list[Event]:
        """One line while the early choice may still change. The lines since the
        choice are kept (at most WINDOW) so that a switch can hand the new parser
        its format's lines from the first one it would have recognised."""
        self._held_lines += block.count
        since = self._since
        before = dict(since)
        self._count(block.text, since)
        retained = self._retained
        retained.append(block)
        for name, n in since.items():
            if n and not before.get(name):
                self._first_seen.setdefault(name, len(retained) - 1)
        mine = since.get(self.chosen, 0)  # type: ignore[arg-type]
        for name, n in since.items():
            if name != self.chosen and n >= DECIDE_HITS and n > 2 * mine:
                self._confirming = False
                self.switched = True
                start = self._first_seen.get(name, len(retained) - 1)
                self._settle(name, f"switched from {self.chosen} at line {retained[start].first_line}: "
                                   f"{n} {name} signature lines against {mine}")
                out: list[Event] = []
                for held in retained[start:]:
                    # a line the old parser already read stays its, no double events
                    if held.first_line in self._emitted:
                        continue
                    out.extend(self._delegate.feed(held))  # type: ignore[union-attr]
                self._retained, self._emitted = [], set()
                return out
        out = self._delegate.feed(block)  # type: ignore[union-attr]
        if out:
            self._emitted.add(block.first_line)
        if self._held_lines >= WINDOW:
            self._confirming = False
            self._final = True
            self._retained, self._emitted = [], set()
            self.feed = self._delegate.feed  # type: ignore[union-attr,method-assign]
        return out

    def _fallback(self) -> list[Event]:
        out = self._release(FALLBACK, f"no known format in the first {self._held_lines} lines")
        # keep watching: undo the direct delegation, switch once when a format shows up
        self._final = False
        del self.feed
        del self.finish
        self._any = re.compile("|".join(f"(?:{p.pattern})" for _, p in self._sigs), re.M)
        return out

    def _watch(self, block: LineBlock) -> list[Event]:
        text = block.text
        m = self._any.search(text)  # type: ignore[union-attr]
        if m is None:
            return self._delegate.feed(block)  # type: ignore[union-attr]
        # The first line with a signature decides, by priority among the
        # signatures on that line; the lines before it stay with the fallback.
        k = text.count("\n", 0, m.start())
        line_start = text.rfind("\n", 0, m.start()) + 1
        line_end = text.find("\n", m.start()) + 1
        name = next(n for n, pat in self._sigs if pat.search(text, line_start, line_end))
        out = self._delegate.feed(_slice(block, 0, k)) if k else []  # type: ignore[union-attr]
        excerpt = m.group(0)[:60]
        self.switched = True
        self._settle(name, f"switched from {FALLBACK} at line {block.first_line + k}: {excerpt!r}")
        out.extend(self._delegate.feed(_slice(block, k)))  # type: ignore[union-attr]
        return out

    def _settle(self, name: str, reason: str) -> None:
        self.chosen, self.reason = name, reason
        self._final = True
        self._delegate = create_parser(name, self.options)
        self.feed = self._delegate.feed  # type: ignore[method-assign]
        self.finish = self._delegate.finish  # type: ignore[method-assign]
        log.info("parser auto: chose %s (%s)", name, reason)
