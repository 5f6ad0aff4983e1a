"""Rank prefixes stripped before parsing, each rank parsed by its own parser, and only the
selected ranks reported.

Under torchrun ``--tee``, ``mpirun --tag-output`` or ``srun --label`` every rank prints the same
metrics, each line behind its rank's prefix (see `rankprefix`). Fed to one parser, eight ranks
would give eight copies of every metric, and their steps would interleave in one parser's state.
`RankRouter` is a `Parser` that sits in front of the real ones:

- per stream, `rankprefix.Evidence` decides from the first lines whether the stream carries a
  prefix. Lines before the first one that starts like a prefix go to the parser at once (they
  would go there whatever the decision), so an ordinary log is never held back; from that line
  on, lines are held until the decision. A plain stream then goes to the one parser unchanged,
  block for block, at the cost of a call;
- in a prefixed stream each line loses its prefix; consecutive lines of one rank become one
  `LineBlock` numbered as the physical lines were (a parser numbers lines
  ``block.first_line + offset``), fed to that rank's own parser (made by `parser_factory` when
  the rank first shows up), whose metrics say ``rank``. Lines of ranks not selected are dropped
  before any parser reads them; lines without a prefix (the launcher's own) go to the parser of
  the unprefixed lines and are always reported;
- a rewritten line may hold several ranks' states (a launcher that labels every ``\\r``
  segment): the splitter draws each label's states apart and gives each behind its label
  (`lines.Rows`), so each rank's parser reads its own states, as one line of that number;
- a launcher that writes a line's start before its end (torchrun's TailLog) may put another
  rank's write between them, on the same physical line, behind its label: the start is held for
  its rank, whose next write goes on with it, and the line is that rank's where it ends.

The bytes passed through to the terminal and to the output log are never touched: only what
the parsers read is stripped.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, ClassVar, NamedTuple, Optional

from ..events import Event, Metric, with_stream
from .lines import LineBlock
from .rankprefix import Evidence, PrefixForm

if TYPE_CHECKING:  # the config checks selections with this module: it stays light to import
    from ..parsers.base import Parser

__all__ = ["RankSelection", "parse_rank_selection", "RankRouter", "ALL_RANKS", "SELECTION_FORMS"]

ALL_RANKS = "all"
_MAX_PARTIAL = 1 << 20  # characters of a rank's line start held for its end (a line's bound: lines.DEFAULT_MAX_LINE)
_Partial = tuple[str, int, float, float]  # a rank's line start: text, physical line of its last write, times
SELECTION_FORMS = f"must be {ALL_RANKS} or rank numbers separated by commas (0 or 0,3)"
_new_tuple = tuple.__new__
_RANK_FIELD = Metric._fields.index("rank")
_STREAM_FIELD = Metric._fields.index("stream")
assert _STREAM_FIELD < _RANK_FIELD


class RankSelection(NamedTuple):
    """Which ranks' metrics are reported: every rank, or the ranks listed. A NamedTuple: every
    run defines it, and a frozen dataclass costs ~0.5 ms to define."""

    every: bool
    ranks: frozenset = frozenset()

    def includes(self, rank: int) -> bool:
        return self.every or rank in self.ranks


def parse_rank_selection(text: str) -> RankSelection:
    """``all``, or rank numbers separated by commas (``0``, ``0,3``); ValueError otherwise."""
    text = text.strip()
    if text == ALL_RANKS:
        return RankSelection(True)
    parts = [p.strip() for p in text.split(",")]
    if not text or not all(p.isdigit() and p.isascii() for p in parts):
        raise ValueError(f"{SELECTION_FORMS}, got {text!r}")
    return RankSelection(False, frozenset(int(p) for p in parts))


def _with_rank(events: list[Event], rank: int, stream: Optional[str] = None) -> list[Event]:
    """`events` with `rank` set on the metrics (a checkpoint announcement has no rank), and the
    block's `stream` when given, in the same copy (what `with_stream` would do after it)."""
    cut = _RANK_FIELD
    if stream is None:
        return [_new_tuple(Metric, ev[:cut] + (rank,) + ev[cut + 1:]) if type(ev) is Metric else ev for ev in events]
    at = _STREAM_FIELD
    return [_new_tuple(Metric, ev[:at] + (stream,) + ev[at + 1:cut] + (rank,) + ev[cut + 1:])
            if type(ev) is Metric else with_stream([ev], stream)[0] for ev in events]


def _sub_block(block: LineBlock, texts: list[str], start: int) -> LineBlock:
    """`texts`, lines of `block` from its `start`-th on (as they are, or stripped), as a block
    numbered as those physical lines. Built without NamedTuple's checks: ranks printing in
    turn make one block per line."""
    first = block.first_line + start
    n = len(texts)
    cut = tuple(k for k in block.truncated if first <= k < first + n) if block.truncated else ()
    text = texts[0] + "\n" if n == 1 else "\n".join(texts) + "\n"
    # A block's last text line may be a line still open (its early terminal states, lines.py):
    # the sub-block that ends there carries it as its own open line, not counted.
    open_line = block.open_line and start + n == block.count + 1
    return _new_tuple(LineBlock, (text, block.stream, first, n - open_line, block.time, block.wall_time, cut,
                                  open_line))


def _ranks_states(text: str, match: Callable) -> dict[Optional[int], str]:
    """A rewritten line's states by rank (None: without a prefix), each rank's stripped and in
    order, ranks in the order they first show. The splitter draws each label's states on a row of
    their own and gives every state behind its label (lines.Rows), a line still open included,
    so a state says its rank wherever a block boundary falls."""
    by_rank: dict[Optional[int], list[str]] = {}
    for state in text.split("\r"):
        m = match(state)
        if m is None:
            by_rank.setdefault(None, []).append(state)
        else:
            by_rank.setdefault(int(m.group("rank")), []).append(state[m.end():])
    return {rank: "\r".join(states) for rank, states in by_rank.items()}


def _around_rank(text: str, m: re.Match) -> tuple[str, str]:
    """A label's text before and after its rank number (``[default``, ``]:``): its launcher's shape."""
    return text[m.start():m.start("rank")], text[m.end("rank"):m.end()].rstrip(" ")


class _StreamState:
    """One stream's decision, and the blocks held until it is made."""

    __slots__ = ("evidence", "held")  # held: from the first line that starts like a prefix on

    def __init__(self) -> None:
        self.evidence = Evidence()
        self.held: list[LineBlock] = []


class RankRouter:
    """A `Parser` that strips rank prefixes and gives each selected rank its own parser.

    `parser_factory` makes a fresh parser (the configured one: ``auto`` chooses per rank, on
    the stripped lines); one reads the lines without a prefix (`unranked`). Given `name` (the
    parser's, when making it cannot fail: a built-in without a rules file), that one is made at
    the first block, on the pipeline thread while the child runs, so a run's start loads no
    parser (and a child that prints nothing, none at all); `name` stands for it until then.
    """

    description: ClassVar[str] = "rank prefixes stripped, one parser per rank"
    # Every event it returns says its block's stream (a rank's metrics are copied with their rank
    # anyway; the unranked parser's are copied unless that parser writes the stream itself).
    stamps_stream: ClassVar[bool] = True

    def __init__(self, parser_factory: Callable[[], "Parser"], selection: RankSelection, *,
                 name: Optional[str] = None) -> None:
        self._factory = parser_factory
        self.selection = selection
        self._name = name
        self.unranked: Optional["Parser"] = None
        self._unranked_stamps = False
        if name is None:
            self._make_unranked()
        self.by_rank: dict[int, "Parser"] = {}
        self._streams: dict[str, _StreamState] = {}
        self.forms: dict[str, Optional[PrefixForm]] = {}  # stream -> adopted form (None: plain)
        self._partial: dict[tuple[str, int], _Partial] = {}  # (stream, rank) -> its line's start
        self._streams_read: set[str] = set()  # one stream: what finish() releases came from it

    @property
    def name(self) -> str:
        if self.unranked is None:
            return str(self._name)
        return str(getattr(self.unranked, "name", type(self.unranked).__name__))

    def _make_unranked(self) -> None:
        self.unranked = self._factory()
        self._unranked_stamps = bool(getattr(self.unranked, "stamps_stream", False))

    def feed(self, block: LineBlock) -> list[Event]:
        if self.unranked is None:
            self._make_unranked()
        stream = block.stream
        self._streams_read.add(stream)
        if stream in self.forms:
            form = self.forms[stream]
            return self._feed_unranked(block) if form is None else self._route(block, form)
        state = self._streams.get(stream)
        if state is None:
            state = self._streams[stream] = _StreamState()
        lines = block.text.split("\n")
        lines.pop()
        hold_from = 0 if state.held else None
        add = state.evidence.add
        for i, text in enumerate(lines):
            if add(text) and hold_from is None:
                hold_from = i
            if state.evidence.decided:
                break
        out: list[Event] = []
        if hold_from is None:
            out = self._feed_unranked(block)
        elif hold_from == 0:
            state.held.append(block)
        else:
            out = self._feed_unranked(_sub_block(block, lines[:hold_from], 0))
            state.held.append(_sub_block(block, lines[hold_from:], hold_from))
        if state.evidence.decided:
            out = out + self._release(stream)
        return out

    def finish(self) -> list[Event]:
        if self.unranked is None:
            return []  # nothing was fed: no parser was made, none holds anything
        out: list[Event] = []
        for stream, state in list(self._streams.items()):
            state.evidence.finish()
            out.extend(self._release(stream))
        for (stream, rank), (text, line, time, wall_time) in self._partial.items():
            # a start no end followed: the rank's last line, as the stream's end ends any line
            out.extend(self._feed_run(LineBlock(text + "\n", stream, line, 1, time, wall_time), rank, [text], 0))
        self._partial = {}
        # What the parsers held back (a Rich bar waiting for its continuation lines) came from the
        # one stream read, when there was one (a replay's "log"); with two, the parser's own stands.
        last = next(iter(self._streams_read)) if len(self._streams_read) == 1 else "stdout"
        held = self.unranked.finish()
        out.extend(held if self._unranked_stamps or last == "stdout" else with_stream(held, last))
        for rank in sorted(self.by_rank):
            out.extend(_with_rank(self.by_rank[rank].finish(), rank, None if last == "stdout" else last))
        return out

    # -- internals ---------------------------------------------------------

    def _release(self, stream: str) -> list[Event]:
        """The stream's decision is made: parse what was held by it, and parse the rest directly."""
        state = self._streams.pop(stream)
        form = self.forms[stream] = state.evidence.form
        out: list[Event] = []
        for block in state.held:
            out.extend(self._feed_unranked(block) if form is None else self._route(block, form))
        # Released by `finish`, the events pass no block that says their stream: they say it here.
        return with_stream(out, stream) if stream != "stdout" else out

    def _route(self, block: LineBlock, form: PrefixForm) -> list[Event]:
        """Each run of consecutive lines of one rank, stripped, to that rank's parser; the states
        of a rewritten line that several ranks share, to each rank's parser apart."""
        match, mark, partial = form.pattern.match, form.partial_writes, self._partial
        every, chosen = self.selection.every, self.selection.ranks
        out: list[Event] = []
        run: list[str] = []
        run_rank: Optional[int] = -1  # -1: no run open; None: lines without a prefix
        run_start = 0
        lines = block.text.split("\n")
        lines.pop()
        rewritten = "\r" in block.text  # one test a block: most hold no rewritten line
        for i, text in enumerate(lines):
            if rewritten and "\r" in text:
                pieces = _ranks_states(text, match)
                if len(pieces) > 1:
                    if run:
                        out.extend(self._feed_run(block, run_rank, run, run_start))
                    run, run_rank = [], -1
                    for rank, states in pieces.items():
                        if rank is None or every or rank in chosen:
                            out.extend(self._feed_run(block, rank, [states], i))
                    continue
                ((rank, text),) = pieces.items()
            else:
                m = match(text)
                if m is None:
                    rank = None
                elif partial or (mark and text.find(mark, m.end()) >= 0):
                    rank, text = self._writes(block, i, text, m, form)
                else:
                    rank = int(m.group("rank"))
                    text = text[m.end():] if every or rank in chosen else ""  # only what a parser reads
            if rank != run_rank:
                if run:
                    out.extend(self._feed_run(block, run_rank, run, run_start))
                run, run_rank, run_start = [], rank, i
            if rank is None or every or rank in chosen:
                run.append(text)
        if run:
            out.extend(self._feed_run(block, run_rank, run, run_start))
        return out

    def _writes(self, block: LineBlock, i: int, text: str, first: re.Match, form: PrefixForm) -> tuple[int, str]:
        """A physical line of one or more launcher writes, each behind its label (``[default0]:
        29%|##| 48/1677[default1]:{'loss': ...}``: TailLog wrote rank 0's bar before its \\r came):
        each write but the last starts a line of its rank, or goes on with the one its rank
        started; the last ends its rank's line. Its rank, and that whole line. Only labels like
        the first (the same text around the rank number) count: a launcher writes one form."""
        labels = [first]
        if form.partial_writes:
            shape = _around_rank(text, first)
            labels += [m for m in form.pattern.finditer(text, first.end()) if _around_rank(text, m) == shape]
        ends = [m.start() for m in labels[1:]] + [len(text)]
        for m, end in zip(labels, ends):
            rank = int(m.group("rank"))
            key = (block.stream, rank)
            # a write that goes on with its rank's line keeps a space after its label: the line's own
            start = m.end() - 1 if key in self._partial and m.group(0).endswith(" ") else m.end()
            if end < len(text):
                self._start(block, i, rank, text[start:end])
        held = self._partial.pop(key, None)
        return rank, text[start:] if held is None else held[0] + text[start:]

    def _start(self, block: LineBlock, i: int, rank: int, text: str) -> None:
        """`text` starts (or goes on with) a line of `rank`: held until that rank's line ends."""
        if not self.selection.includes(rank):
            return
        key = (block.stream, rank)
        held = self._partial.get(key)
        text = (text if held is None else held[0] + text)[:_MAX_PARTIAL]
        self._partial[key] = (text, block.first_line + i, block.time, block.wall_time)

    def _feed_unranked(self, block: LineBlock) -> list[Event]:
        events = self.unranked.feed(block)
        if self._unranked_stamps or block.stream == "stdout" or not events:
            return events
        return with_stream(events, block.stream)

    def _feed_run(self, block: LineBlock, rank: Optional[int], texts: list[str], start: int) -> list[Event]:
        sub = _sub_block(block, texts, start)
        if rank is None:
            return self._feed_unranked(sub)
        parser = self.by_rank.get(rank)
        if parser is None:
            parser = self.by_rank[rank] = self._factory()
        return _with_rank(parser.feed(sub), rank, block.stream)
