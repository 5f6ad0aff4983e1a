"""The line prefixes distributed launchers put before every line of a rank's output, and the
rule that decides, once per stream, whether a stream carries one.

Each form is written here as the launcher's source writes it:

- ``torchrun``: torch.distributed.elastic's TailLog (``--tee``) writes ``[{role}{local_rank}]:``
  before each line, nothing between it and the line (role ``default`` unless ``--role`` says
  otherwise: ``[default0]:``; Accelerate forwards ``--tee``/``--role`` to it). It reads each
  rank's file in text mode, universal newlines translated: a ``\\r`` ends a line as ``\\n`` does
  and is written as one, so each state of a progress bar is a labelled line of its own. It
  polls, and writes what the file holds: a line whose end has not come yet is written, and its
  end later, behind the label again, so another rank's write may come between them on the
  same physical line (`PrefixForm.partial_writes`). A
  ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE`` such as ``[rank${rank}]:`` gives the global rank;
  c10's own log lines (``[rank1]:[W ...``) and PyTorch's rank-prefixed tracebacks
  (``[rank1]: Traceback``) have the same shape. One space after the colon is part of the prefix.
- ``mpi``: Open MPI's ``--tag-output``, ``[jobid,rank]<stdout>:`` (ORTE, no space; PMIx-based
  Open MPI 5 adds one, and ``[jobid,rank][host:pid]<stdout>: `` in its detailed form), with
  ``--timestamp-output`` a ctime stamp before it; ``horovodrun`` with Gloo writes
  ``[rank]<stdout>:`` (and the same stamp with ``--timestamp-output``). ``stderr`` and
  ``stddiag`` likewise.
- ``srun``: Slurm's ``srun --label`` writes ``%0*d: `` -- the task number zero-padded to one
  width for the whole step (``0: ``, ``07: ``).

Bracketed forms are rare in ordinary logs; ``N: `` is not (darknet prints ``6001: 5.44, ...``,
evaluation tables print ``0: 0.55``). So no form is trusted from one line: a stream adopts a
form when at least `MIN_LINES` of its first lines carry it, they are at least as many as the
lines that carry none, and its labels repeat -- a launcher's ranks all print the same things,
a counter never repeats: at least a quarter as many lines repeat a label as there are labels
(and two), so 64 ranks that each print one line first are recognised at their 80th line. An
``srun`` label of another width than the first rules the form out (``srun`` pads every label
of a step to one width; a counter reaching 10 does not), and its lines then count as plain.
`GIVE_UP` plain lines before the decision make the stream plain for good, and so do `WINDOW`
lines without one. The rule reads lines in order, one at a time, so it decides at the same
line whatever the chunking.
"""
from __future__ import annotations

import re
from typing import NamedTuple, Optional

__all__ = ["PrefixForm", "FORMS", "Evidence", "MIN_LINES", "GIVE_UP", "WINDOW", "match_prefix",
           "label_at_start", "segment_label"]

MIN_LINES = 8
GIVE_UP = 32  # torch.distributed.launch alone prints 14 lines of warnings before its ranks do
WINDOW = 256
_CTIME = r"(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?"


class PrefixForm(NamedTuple):
    """One launcher's prefix: `pattern` matches at a line's start, group ``rank`` is the rank.
    A NamedTuple: every run defines the forms, and a frozen dataclass costs ~0.5 ms to define."""

    name: str
    pattern: re.Pattern
    same_width: bool = False  # every label of the stream is padded to one width (srun)
    # When the launcher writes the start of a rank's line before its end (TailLog writes what a
    # rank's file holds at each poll, a bar without its \r included, and the rest later behind the
    # label again), a physical line may hold several writes, each behind its label: then this is
    # what every label of the form ends with (the cheap test for a second label in a line).
    partial_writes: str = ""


FORMS: tuple[PrefixForm, ...] = (
    PrefixForm("mpi", re.compile(_CTIME + r"\[(?:[^\],\s]+,)?(?P<rank>\d+)\]"
                                 r"(?:\[[^\]\s]*\])?<std(?:out|err|diag)>: ?")),
    PrefixForm("torchrun", re.compile(r"\[[A-Za-z_][A-Za-z_-]*?(?P<rank>\d+)\]: ?"), partial_writes="]:"),
    PrefixForm("srun", re.compile(r"(?P<rank>\d{1,6}): "), same_width=True),
)


def match_prefix(text: str) -> Optional[tuple[PrefixForm, re.Match]]:
    """The first form whose prefix starts `text`, with its match; None for a plain line."""
    for form in FORMS:
        m = form.pattern.match(text)
        if m is not None:
            return form, m
    return None


# Any form, in one pattern: the splitter's test of each rewritten line's start (a pattern may not
# name a group twice, so the forms' `rank` groups become plain ones here).
_ANY_FORM = re.compile("|".join(form.pattern.pattern.replace("(?P<rank>", "(?:") for form in FORMS))


# `label_at_start(text)`: a match when `text` starts with a prefix form, else None (what
# `match_prefix` says, in one pattern, with no Python call around it: the splitter asks it per line)
label_at_start = _ANY_FORM.match


def segment_label(segment: str) -> Optional[tuple[tuple[str, str], str]]:
    """``(key, label)`` for a segment that starts with a prefix form, else None.

    `key` names the rank (form and rank number: Open MPI's timestamp changes, its rank does not);
    `label` is the prefix without the one space a form may take after it. That space may be the
    child's own (tqdm's bar starts with one: ``[rank0]: 29%|``), and a row drawn with it stays at
    the columns the child wrote; a space that is the launcher's (``0: ``) shifts every state of
    its row alike, which a terminal would show the same way.
    """
    hit = match_prefix(segment)
    if hit is None:
        return None
    form, m = hit
    label = m.group(0)
    return (form.name, m.group("rank")), label[:-1] if label.endswith(" ") else label


class _FormCount:
    """One form's lines so far, and the ranks and label widths they showed (mutable, private to
    `Evidence`: a plain class, not a dataclass, costs nothing to define at every run's start)."""

    __slots__ = ("lines", "ranks", "widths")

    def __init__(self) -> None:
        self.lines = 0
        self.ranks: set[int] = set()
        self.widths: set[int] = set()


class Evidence:
    """What the first lines of one stream say about its prefix. Feed lines with `add` until
    `decided`; `form` is then the adopted form, or None for a plain stream."""

    def __init__(self) -> None:
        self.decided = False
        self.form: Optional[PrefixForm] = None
        self._seen = 0
        self._plain = 0
        self._counts: dict[str, _FormCount] = {}

    def add(self, text: str) -> bool:
        """One line, in stream order (blank lines say nothing); True when it starts with a prefix form."""
        if self.decided or not text.strip():
            return False
        self._seen += 1
        hit = match_prefix(text)
        if hit is not None and self._count(*hit):
            self._decide(hit[0])
        elif hit is None or self._ruled_out(hit[0]):
            self._plain += 1
        if not self.decided and (self._plain >= GIVE_UP or self._seen >= WINDOW):
            self._decide(None)
        return hit is not None

    def _count(self, form: PrefixForm, m: re.Match) -> bool:
        """Count a line of `form`; True when that makes the form evident."""
        count = self._counts.setdefault(form.name, _FormCount())
        count.lines += 1
        count.ranks.add(int(m.group("rank")))
        count.widths.add(len(m.group("rank")))
        return self._evident(form, MIN_LINES, 2)

    def finish(self) -> None:
        """The stream ended before the rule decided: a short stream needs two lines, one label repeated."""
        if not self.decided:
            self._decide(next((f for f in FORMS if self._evident(f, 2, 1)), None))

    def _ruled_out(self, form: PrefixForm) -> bool:
        return form.same_width and len(self._counts[form.name].widths) > 1

    def _evident(self, form: PrefixForm, min_lines: int, min_repeats: int) -> bool:
        count = self._counts.get(form.name)
        if count is None or count.lines < min_lines or count.lines < self._plain or self._ruled_out(form):
            return False
        repeats, labels = count.lines - len(count.ranks), len(count.ranks)
        return repeats >= min_repeats and 4 * repeats >= labels

    def _decide(self, form: Optional[PrefixForm]) -> None:
        self.decided, self.form = True, form
