"""Ranks that interleave their rewritten lines: each rank's states are drawn on a row of their own
and reach that rank's parser only, whatever launcher wrote the labels and wherever they stand.

The TRL log (tqdm bars rewritten with bare \\r, metric dicts between them) is labelled the way
launchers label: rank 0's piece, then rank 1's same piece with other numbers. Where a launcher
puts its label depends on how it reads each rank's output:

- segment by segment: a reader that splits at every \\r and \\n and keeps them (Python's
  universal newlines untranslated, ``newline=""``) writes ``[rank0]:`` + each \\r segment, so one
  physical line interleaves both ranks' bar states. This is what users saw: drawn on one row,
  rank 0's states kept the tail of rank 1's dict, and rank 0 reported 18 of rank 1's values;
- line by line: srun --label and Open MPI's --tag-output label at each \\n, the \\r segments stay
  behind one label;
- torchrun --tee: TailLog reads each rank's file in text mode (universal newlines, translated),
  so every \\r ends a line and each segment comes on a line of its own behind its label; and
  while a rank runs, each poll writes what the rank's file holds, a bar whose \\r has not come
  yet included, so another rank's write lands on the same physical line, behind its label.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from contextlib import ExitStack

import pytest
from hypothesis import example, given, settings, strategies as st

from trainvisor.cli import main
from trainvisor.events import Metric
from trainvisor.stream.lines import MAX_ROWS, LineSplitter
from trainvisor.parsers import ParserOptions, create_parser
from trainvisor.stream.rankprefix import segment_label
from trainvisor.stream.ranks import RankRouter, parse_rank_selection

from .conftest import real_logs
from .parsing_helpers import feed_pieces, parse_file

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
TRL = "llama-sft-trl-tqdm-cr.log"
# rank 1 prints the same lines with other numbers: every digit moved on by three
OTHER_NUMBERS = bytes.maketrans(b"0123456789", b"3456789012")


def by_segment(rank0: bytes, rank1: bytes, label: bytes) -> bytes:
    """Each \\r or \\n segment behind its rank's label, rank 0's then rank 1's."""
    return b"".join(b"[%s0]:%s[%s1]:%s" % (label, a, label, b)
                    for a, b in zip(rank0.splitlines(keepends=True), rank1.splitlines(keepends=True), strict=True))


def by_line(rank0: bytes, rank1: bytes, label: bytes) -> bytes:
    """Each \\n line behind its rank's label, its \\r segments with it."""
    pairs = zip(rank0.split(b"\n")[:-1], rank1.split(b"\n")[:-1], strict=True)
    return b"".join(b"[%s0]:%s\n[%s1]:%s\n" % (label, a, label, b) for a, b in pairs)


def by_torchrun_tee(rank0, rank1, label: bytes, workdir) -> bytes:
    """What torch.distributed.elastic's own tail function writes for each rank's file (the real
    code, on files that are complete: it reads to their end and stops), one line of each in turn.
    (`workdir`, unused, keeps one signature with the polled form.)"""
    tail_log = pytest.importorskip("torch.distributed.elastic.multiprocessing.tail_log")
    outputs = []
    for rank, path in enumerate((rank0, rank1)):
        written: list[str] = []
        done = threading.Event()
        done.set()

        class Destination:
            write = staticmethod(written.append)

        tail_log.tail_logfile(f"[{label.decode()}{rank}]:", str(path), Destination(), done, 0.01, lambda _: True)
        outputs.append(written)
    return "".join(a + b for a, b in zip(*outputs, strict=True)).encode()


def by_torchrun_tee_polled(rank0, rank1, label: bytes, workdir) -> bytes:
    """What torchrun --tee writes while both ranks run, each poll after each write of a rank.

    A rank's program writes tqdm's states ("\\r" + the state) and printed lines; after each
    write TailLog's poll of that rank's file does what tail_logfile (torch/distributed/elastic/
    multiprocessing/tail_log.py) does in its loop: readline() on the file opened in text mode
    (``open(file, errors="replace")``) until it returns nothing, each line written behind the
    header. Its sleep between polls is what this leaves out: here the ranks take turns.
    """
    writes = [re.findall(rb"\r?[^\r\n]*\n?", path.read_bytes())[:-1] for path in (rank0, rank1)]
    files = [workdir / f"polled-{rank}.log" for rank in (0, 1)]
    out: list[str] = []
    with ExitStack() as stack:
        sinks = [stack.enter_context(open(f, "wb", buffering=0)) for f in files]
        sources = [stack.enter_context(open(f, errors="replace")) for f in files]
        for pair in zip(*writes, strict=True):
            for rank, piece in enumerate(pair):
                sinks[rank].write(piece)
                out += [f"[{label.decode()}{rank}]:{line}" for line in iter(sources[rank].readline, "")]
    return "".join(out).encode()


def generic_router(ranks: str = "all") -> RankRouter:
    return RankRouter(lambda: create_parser("generic", ParserOptions()), parse_rank_selection(ranks))


def losses(events) -> list[tuple]:
    return [(m.rank, m.iteration, m.value, m.line) for m in events if m.name == "loss"]


@pytest.fixture(scope="module")
def trl(tmp_path_factory):
    """(rank 0's log, rank 1's log) as files, rank 1's with its own numbers."""
    log = real_logs("huggingface") / TRL
    if not log.exists():
        pytest.skip(f"{log} is absent (the shared real logs are not on this machine)")
    other = tmp_path_factory.mktemp("trl") / "rank1.log"
    other.write_bytes(log.read_bytes().translate(OTHER_NUMBERS))
    return log, other


def build(labelled, trl, label: bytes, workdir) -> bytes:
    """The log `labelled` makes of both ranks' logs."""
    rank0, rank1 = trl
    if labelled in (by_torchrun_tee, by_torchrun_tee_polled):  # torch's code reads files
        return labelled(rank0, rank1, label, workdir)
    return labelled(rank0.read_bytes(), rank1.read_bytes(), label)


def key(metric: Metric) -> tuple:
    return metric.name, repr(metric.value), metric.iteration, metric.epoch, metric.phase, metric.running


def alone(path) -> list[Metric]:
    """A rank's log parsed on its own, without a launcher."""
    return [e for e in parse_file(path)[1] if type(e) is Metric]


def routed(data: bytes, tmp_path, ranks: str) -> tuple[RankRouter, list[Metric]]:
    path = tmp_path / "prefixed.log"
    path.write_bytes(data)
    router = RankRouter(lambda: create_parser("auto", ParserOptions(year=2026)), parse_rank_selection(ranks))
    return router, [e for e in parse_file(path, parser=router)[1] if type(e) is Metric]


@pytest.mark.parametrize("label", [b"rank", b"default"])
@pytest.mark.parametrize("labelled", [by_segment, by_line, by_torchrun_tee, by_torchrun_tee_polled],
                         ids=lambda f: f.__name__)
def test_each_rank_reports_what_its_own_log_reports_and_nothing_of_the_other(trl, tmp_path, labelled, label):
    rank0, rank1 = trl
    router, metrics = routed(build(labelled, trl, label, tmp_path), tmp_path, "all")
    assert {p.chosen for p in router.by_rank.values()} == {"huggingface"} and sorted(router.by_rank) == [0, 1]
    own0, own1 = alone(rank0), alone(rank1)
    assert len(own0) == len(own1) == 1027
    assert [key(m) for m in metrics if m.rank == 0] == [key(m) for m in own0]
    assert [key(m) for m in metrics if m.rank == 1] == [key(m) for m in own1]
    assert {m.rank for m in metrics} == {0, 1}


@pytest.mark.parametrize("label", [b"rank", b"default"])
def test_replay_of_ranks_labelled_segment_by_segment_reports_rank_0s_own_records(trl, tmp_path, label):
    rank0, rank1 = trl
    log = tmp_path / "prefixed.log"
    log.write_bytes(by_segment(rank0.read_bytes(), rank1.read_bytes(), label))
    out = tmp_path / "m.jsonl"
    main(["replay", "--ranks", "0", "--metrics", str(out), str(log)])
    got = [json.loads(line) for line in out.read_text().splitlines()]
    own = alone(rank0)
    assert len(got) == len(own) == 1027 and {r["rank"] for r in got} == {0}
    assert [(r["name"], r["value"], r["iteration"], r["epoch"], r["phase"]) for r in got] == [
        (m.name, m.value, m.iteration, m.epoch, m.phase) for m in own]
    # each record on the physical line of rank 0's piece: line k of its own log is line 2k - 1 here
    assert [r["line"] for r in got] == [2 * m.line - 1 for m in own]
    leaked = next(r for r in got if r["line"] == 2 * 91 - 1 and r["name"] == "loss")
    assert (leaked["value"], leaked["epoch"]) == (0.7535, 0.8591)  # not rank 1's 3.0868 at 3.1824


LIVE = [(by_segment, b"rank"), (by_segment, b"default"), (by_torchrun_tee_polled, b"default")]


@pytest.mark.parametrize("labelled, label", LIVE, ids=lambda x: getattr(x, "__name__", x))
def test_a_live_run_of_labelled_ranks_reports_rank_0s_own_records(trl, tmp_path, labelled, label):
    log = tmp_path / "prefixed.log"
    data = build(labelled, trl, label, tmp_path)
    log.write_bytes(data)
    # the launcher's writes: one per labelled piece, \r or \n segment, as it wrote them
    child = "import os, sys\nfor piece in open(sys.argv[1], 'rb').read().splitlines(True): os.write(1, piece)"
    proc = subprocess.run(
        TRAINVISOR + ["run", "-q", "--ranks", "0", "--run-dir", str(tmp_path / "run"), "--", sys.executable, "-c",
                      child, str(log)], capture_output=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == data  # the bytes pass through as the launcher wrote them
    got = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["rank"], r["name"], r["value"], r["iteration"], r["epoch"]) for r in got] == [
        (0, m.name, m.value, m.iteration, m.epoch) for m in alone(trl[0])]


class Spy:
    """A parser that keeps the lines it reads (its rank's), as (line number, text)."""

    name, description = "spy", "keeps what it reads"

    def __init__(self) -> None:
        self.lines: list[tuple[int, str]] = []

    def feed(self, block):
        texts = block.text.split("\n")[: block.count + block.open_line]
        self.lines += [(block.first_line + i, text) for i, text in enumerate(texts)]
        return []

    def finish(self):
        return []


def states_read(data: bytes, chunk: int, ranks: str = "all") -> dict:
    """The states each rank's parser read, line by line (a line handed out early and its end, one line)."""
    router = RankRouter(Spy, parse_rank_selection(ranks))
    feed_pieces(router, [data[i:i + chunk] for i in range(0, len(data), chunk)])
    out = {}
    for rank, spy in [(None, router.unranked)] + sorted(router.by_rank.items()):
        lines: dict[int, list[str]] = {}
        for number, text in spy.lines:
            lines.setdefault(number, []).extend(text.split("\r"))
        out[rank] = lines
    return out


def behind_a_label(lines: dict) -> dict:
    """States as a rank's parser reads them behind a label: the router takes one space after a
    label for the label's own (`rankprefix`), whoever wrote it."""
    return {number: [s[1:] if s.startswith(" ") else s for s in states] for number, states in lines.items()}


@pytest.mark.parametrize("chunk", [97, 4096, 65536])
def test_rank_0_reads_the_states_a_terminal_shows_of_its_own_output_in_any_chunking(trl, chunk):
    # the first 100 lines hold the loading bars and the first training bar: 37,000 to 71,000
    # characters of states a line, past the budget at which an open line hands states out early
    rank0, rank1 = (p.read_bytes().split(b"\n") for p in trl)
    own0, own1 = (b"\n".join(lines[:100]) + b"\n" for lines in (rank0, rank1))
    alone0 = behind_a_label(states_read(own0, 65536)[None])
    for labelled in (by_segment, by_line):
        read = states_read(labelled(own0, own1, b"rank"), chunk)
        assert read[None] == {}  # nothing without a label
        assert {k // 2 + 1: v for k, v in read[0].items()} == alone0  # line k of its own is 2k - 1
    # labelled line by line, rank 1's states are its own log's too
    assert {k // 2: v for k, v in states_read(by_line(own0, own1, b"rank"), chunk)[1].items()} == \
        behind_a_label(states_read(own1, 65536)[None])


def test_a_rank_that_rewrites_after_another_keeps_its_own_row():
    data = (b"[rank0]:{'loss': '0.7535', 'epoch': '0.8591'}\r[rank1]:{'loss': '3.0868', 'epoch': '3.1824'}\r"
            b"[rank0]: 29%|##| 480/1677\r[rank1]: 62%|##| 813/4900\n")
    (record,) = LineSplitter("s").feed(data, 0.0, 0.0).records()
    # rank 0's bar is drawn over rank 0's dict: what rank 0's own terminal showed
    assert record.states == ("[rank0]:{'loss': '0.7535', 'epoch': '0.8591'}",
                             "[rank0]: 29%|##| 480/1677, 'epoch': '0.8591'}",
                             "[rank1]:{'loss': '3.0868', 'epoch': '3.1824'}",
                             "[rank1]: 62%|##| 813/4900, 'epoch': '3.1824'}")
    (alone,) = LineSplitter("s").feed(b"{'loss': '0.7535', 'epoch': '0.8591'}\r 29%|##| 480/1677\n", 0.0, 0.0).records()
    assert tuple("[rank0]:" + s for s in alone.states) == record.states[:2]


def test_segments_without_a_label_stay_on_the_row_of_the_label_before_them():
    # srun and Open MPI label at \n only: the bar's later states are that rank's, drawn from
    # the column its own output starts at, and each says its rank
    data = b"07: step 1 loss 0.25\r07: step 2\r step 3 loss 0.125\n"
    (record,) = LineSplitter("s").feed(data, 0.0, 0.0).records()
    assert record.states == ("07: step 1 loss 0.25", "07: step 2 loss 0.25", "07: step 3 loss 0.125")
    unlabelled = LineSplitter("s").feed(b"[default3]:a long first state\rb\n", 0.0, 0.0)
    assert next(unlabelled.records()).states == ("[default3]:a long first state", "[default3]:b long first state")


def test_a_line_of_many_labels_keeps_a_bounded_number_of_rows():
    labels = MAX_ROWS + 6
    data = b"".join(b"[rank%d]:step=%d loss=0.5\r" % (r, r) for r in range(labels)) + b"\n"
    (record,) = LineSplitter("s").feed(data, 0.0, 0.0).records()
    # past MAX_ROWS, a label's segments are drawn on the plain row, behind their own label
    assert record.states[:6] == tuple(f"[rank{r}]:step={r} loss=0.5" for r in range(MAX_ROWS, labels))
    assert sorted(record.states) == sorted(f"[rank{r}]:step={r} loss=0.5" for r in range(labels))
    events = feed_pieces(generic_router(), [data * 8])
    assert sorted({(m.rank, m.iteration) for m in events if m.name == "loss"}) == [(r, r) for r in range(labels)]


HEAD = b"".join(b"[default%d]:step=%d loss=0.%d\n" % (r, i, i) for i in range(1, 5) for r in (0, 1))  # lines 1-8


@pytest.mark.parametrize("chunk", [1, 4096])
def test_a_rank_whose_line_another_ranks_write_follows_keeps_it_until_its_own_end(chunk):
    # TailLog wrote rank 0's line before its end came, then rank 1's whole line, then rank 0's end
    data = HEAD + b"[default0]:step=5 loss=0.5[default1]:step=5 loss=7.5\n[default0]: eta 0s\n"
    events = feed_pieces(generic_router(), [data[i:i + chunk] for i in range(0, len(data), chunk)])
    assert losses(events)[8:] == [(1, 5, 7.5, 9), (0, 5, 0.5, 10)]  # each on the line its rank's end came on
    rank0 = feed_pieces(generic_router("0"), [data])
    assert losses(rank0)[4:] == [(0, 5, 0.5, 10)] and {m.rank for m in rank0} == {0}


def test_a_start_no_end_follows_is_its_ranks_last_line_when_the_stream_ends():
    data = HEAD + b"[default0]:step=5 loss=0.5[default1]:step=5 loss=7.5\n"
    assert losses(feed_pieces(generic_router(), [data]))[8:] == [(1, 5, 7.5, 9), (0, 5, 0.5, 9)]


def test_a_bracketed_word_unlike_the_launchers_label_is_the_lines_text():
    # torchrun's labels all read [default<rank>]: in this stream; [step10]: is the program's
    data = HEAD + b"[default0]:eval [step10]: step=5 loss=0.5\n"
    assert losses(feed_pieces(generic_router(), [data]))[8:] == [(0, 5, 0.5, 9)]
    srun = b"".join(b"%d: step=%d loss=0.%d\n" % (r, i, i) for i in range(1, 5) for r in (0, 1))
    # srun labels at newlines only: "1: " later in a line is never taken for a label
    assert losses(feed_pieces(generic_router(), [srun + b"0: step=5 loss=0.5 1: x\n"]))[8:] == [(0, 5, 0.5, 9)]


def states_by_label(data: bytes, size: int, **kw) -> dict:
    """(line number, label's rank or None) -> the states given behind that label, in order."""
    sp = LineSplitter("s", **kw)
    pieces = [data[i:i + size] for i in range(0, len(data), size)] if size else [data]
    blocks = [sp.feed(p, 0.0, 0.0) for p in pieces] + [sp.finish(0.0, 0.0)]
    out: dict = {}
    for block in filter(None, blocks):
        for i, text in enumerate(block.text.split("\n")[: block.count + block.open_line]):
            for state in text.split("\r"):
                hit = segment_label(state)
                out.setdefault((block.first_line + i, hit and hit[0]), []).append(state)
    return out


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"[rank0]:", b"[rank1]:", b"[default3]: ", b"07: ", b"a", b"bcd", b"\n", b"\r",
                                   b"\r\n", b"\b", b"\x1b[1m", b"xyz" * 7, b"w" * 300]), max_size=80).map(b"".join),
    size=st.integers(min_value=1, max_value=40),
    max_line=st.sampled_from([4, 16, 1 << 20]),
    budget=st.sampled_from([8, 1 << 16]),
)
@example(data=b"[rank0]:\r\n", size=1, max_line=16, budget=8)  # a \r\n split across two reads
@example(data=b"[rank0]:\r\r\n", size=1, max_line=16, budget=8)
@example(data=b"[rank0]:a\b\bX\r\n", size=11, max_line=1 << 20, budget=8)  # a backspace over the label
@example(data=b"\r[rank0]:", size=1, max_line=4, budget=8)  # a cut after a \r that waited
def test_each_labels_states_are_the_same_whatever_the_chunking(data, size, max_line, budget):
    # a row's early states may come out before or after another row's, as the budget falls;
    # each label's own, in order, never change
    whole = states_by_label(data, 0, max_line=max_line, state_budget=budget)
    assert states_by_label(data, size, max_line=max_line, state_budget=budget) == whole
