"""Rank prefixes: each launcher's exact form stripped before parsing, each rank parsed by its own
parser and tagged, rank 0 alone by default, ordinary logs never stripped, and the same events
whether the bytes arrive line by line, in small pieces or whole."""
from __future__ import annotations

from dataclasses import replace

import pytest

from trainvisor.events import Metric
from trainvisor.stream.lines import LineBlock, LineSplitter
from trainvisor.parsers import ParserOptions, create_parser
from trainvisor.parsers.base import LineParser
from trainvisor.stream.pipeline import Pipeline
from trainvisor.stream.rankprefix import Evidence, match_prefix
from trainvisor.stream.ranks import RankRouter, parse_rank_selection

from .caffe_helpers import Collect
from .parsing_helpers import FIXTURES, REAL_LOGS, feed_pieces, parse_file

TORCHRUN = FIXTURES / "ranks-torchrun-tee.log"
MPI = FIXTURES / "ranks-mpi-tag-output.log"
SRUN = FIXTURES / "ranks-srun-label.log"
RANKED = [TORCHRUN, MPI, SRUN]
NUMBERED = FIXTURES / "numbered-steps.log"


def router(ranks: str = "0", parser: str = "auto") -> RankRouter:
    return RankRouter(lambda: create_parser(parser, ParserOptions(year=2026)), parse_rank_selection(ranks))


def routed(path, ranks: str = "0", parser: str = "auto"):
    r = router(ranks, parser)
    return r, parse_file(path, parser=r)[1]


def comparable(events) -> list:
    """Events without wall_time (when trainvisor read the line), NaN made comparable."""
    return [e._replace(wall_time=0.0, value=repr(e.value)) if type(e) is Metric else replace(e, wall_time=0.0)
            for e in events]


@pytest.mark.parametrize("line, form, rank, rest", [
    ("[default0]:Train Epoch: 1 [0/30000 (0%)]\tLoss: 2.305760", "torchrun", 0, "Train Epoch: 1"),
    ("[trainer3]:hello", "torchrun", 3, "hello"),
    ("[rank1]: Traceback (most recent call last):", "torchrun", 1, "Traceback"),
    ("[rank1]:[W1123 22:01:15.123456789 ProcessGroupNCCL.cpp:4115] x", "torchrun", 1, "[W1123"),
    ("[1,0]<stdout>:Epoch 1/3", "mpi", 0, "Epoch 1/3"),
    ("[1,12]<stderr>: Epoch 1/3", "mpi", 12, "Epoch 1/3"),
    ("[prterun-node-7@1,5][node-7:3124]<stdout>: x", "mpi", 5, "x"),
    ("Mon Nov 23 22:10:01 2026[1,3]<stddiag>:x", "mpi", 3, "x"),
    ("[2]<stdout>:Epoch 1/3", "mpi", 2, "Epoch 1/3"),
    ("07: step=100 loss=0.5", "srun", 7, "step=100"),
])
def test_each_launchers_prefix_form_gives_its_rank_and_the_line_behind_it(line, form, rank, rest):
    found, m = match_prefix(line)
    assert (found.name, int(m.group("rank"))) == (form, rank)
    assert line[m.end():].startswith(rest)


@pytest.mark.parametrize("line", ["Epoch 1/3", "[Epoch 1]: loss 0.5", "[1,0] <stdout>: x", " 1: 812.5, 812.5 avg",
                                  "1:loss", "[default]:x", "step 1: loss 0.5"])
def test_lines_that_are_not_prefixes_match_no_form(line):
    assert match_prefix(line) is None


def test_by_default_only_rank_0s_metrics_are_reported_with_the_prefix_stripped():
    r, events = routed(TORCHRUN)
    assert r.by_rank.keys() == {0}  # rank 1's lines are dropped before any parser reads them
    assert r.by_rank[0].chosen == "pytorch"  # auto chose on the stripped lines
    assert [(m.rank, m.name, m.value, m.iteration, m.epoch, m.line) for m in events][:3] == [
        (0, "loss", 2.30576, 0, 1.0, 9), (0, "loss", 1.8231, 6400, 1.0, 11), (0, "loss", 0.913245, 12800, 1.0, 13)]
    assert {m.rank for m in events} == {0} and len(events) == 12
    # "Test set:": the program's word for the phase is kept
    assert [(m.name, m.value, m.phase, m.line) for m in events if m.phase == "test"] == [
        ("loss", 0.1034, "test", 18), ("accuracy", 0.9672, "test", 18),
        ("loss", 0.0611, "test", 32), ("accuracy", 0.981, "test", 32)]


def test_ranks_all_tags_every_rank_and_each_keeps_its_own_steps():
    # Rank 1 prints its epoch-1 result after rank 0 has started epoch 2: with one parser for
    # both, rank 1's line would be counted in epoch 2.
    r, events = routed(MPI, "all")
    assert r.forms["log"].name == "mpi" and sorted(r.by_rank) == [0, 1]
    loss = [(m.rank, m.value, m.iteration, m.epoch, m.line) for m in events if m.name == "loss"]
    assert loss == [(0, 0.3012, 235, 1.0, 5), (1, 0.3088, 235, 1.0, 7), (0, 0.1412, 470, 2.0, 9),
                    (1, 0.145, 470, 2.0, 11), (0, 0.1003, 705, 3.0, 13), (1, 0.0998, 705, 3.0, 14)]
    stripped = "".join(line.split(":", 1)[1] + "\n" for line in MPI.read_text().splitlines()).encode()
    mixed = [(m.value, m.epoch) for m in feed_pieces(create_parser("keras"), [stripped]) if m.name == "loss"]
    assert (0.3088, 2.0) in mixed  # what one parser for both ranks makes of rank 1's first epoch


def test_a_list_of_ranks_keeps_those_ranks():
    r, events = routed(SRUN, "0,3")
    assert sorted(r.by_rank) == [0, 3]
    assert sorted((m.rank, m.iteration, m.value) for m in events if m.name == "loss") == [
        (0, 100, 0.6931), (0, 200, 0.512), (0, 300, 0.4017), (3, 100, 0.695), (3, 200, 0.5161), (3, 300, 0.4055)]
    lines = {(m.rank, m.iteration): m.line for m in events if m.name == "loss"}
    assert lines[(3, 200)] == 10 and lines[(0, 300)] == 11  # physical line numbers of the log


def test_lines_without_a_prefix_in_a_prefixed_stream_stay_with_the_unprefixed_parser():
    text = ("".join(f"[default0]:step={i} loss=0.{i}\n" for i in range(1, 9)) + "step=99 loss=0.99\n").encode()
    r = router("0", "generic")
    events = feed_pieces(r, [text])
    assert [(m.rank, m.iteration) for m in events if m.name == "loss"] == [(0, i) for i in range(1, 9)] + [(None, 99)]


@pytest.mark.parametrize("log", sorted(p for p in FIXTURES.glob("*.log") if not p.name.startswith("ranks-"))
                         + [REAL_LOGS / "darknet" / "darknet-yolov3-tiny-nan.log",
                            REAL_LOGS / "pytorch" / "detr-metriclogger-ddp.log"], ids=lambda p: p.name)
def test_logs_without_rank_prefixes_are_parsed_exactly_as_without_the_router(log):
    if not log.exists():
        pytest.skip(f"{log} is absent (the shared real logs are not on this machine)")
    r, events = routed(log)
    assert r.forms == {"log": None} and not r.by_rank
    assert comparable(events) == comparable(parse_file(log)[1])


def test_numbered_lines_of_an_ordinary_log_are_not_taken_for_srun_labels():
    r, events = routed(NUMBERED)
    assert r.forms == {"log": None}
    assert [(m.rank, m.value, m.line) for m in events][:2] == [(None, 0.6931, 2), (None, 0.6012, 3)]
    assert len(events) == 12


def test_the_decision_needs_evidence_and_is_made_at_the_same_line_whatever_arrives():
    ev = Evidence()
    for i in range(7):
        ev.add(f"[default0]:line {i}")
    assert not ev.decided  # seven lines are not enough
    ev.add("[default1]:line")
    assert ev.decided and ev.form.name == "torchrun"
    counter = Evidence()
    for i in range(1, 40):
        counter.add(f"{i % 10}: loss")  # ten labels in turn, as ten tasks print: adopted once three repeat
        if counter.decided:
            break
    assert counter.decided and counter.form.name == "srun" and i == 13
    plain = Evidence()
    for i in range(31):
        plain.add("ordinary line")
    assert not plain.decided
    plain.add("ordinary line")
    assert plain.decided and plain.form is None  # 32 lines without a prefix: plain for good


def test_a_short_prefixed_stream_is_decided_when_it_ends():
    pieces = [b"[default0]:step=1 loss=0.5\n", b"[default0]:step=2 loss=0.25\n"]
    events = feed_pieces(router("all", "generic"), pieces)
    assert [(m.rank, m.iteration, m.value) for m in events if m.name == "loss"] == [(0, 1, 0.5), (0, 2, 0.25)]


def test_each_stream_decides_for_itself():
    r = router("all", "generic")
    out = [b"[1,1]<stdout>:step=%d loss=0.5\n" % i for i in range(1, 9)]
    err = b"".join(b"step=%d loss=0.7\n" % i for i in range(1, 33))
    split_out, split_err = LineSplitter("stdout"), LineSplitter("stderr")
    events = r.feed(split_err.feed(err, 0.0, 0.0))
    for piece in out:
        events += r.feed(split_out.feed(piece, 0.0, 0.0))
    events += r.finish()
    assert r.forms["stdout"].name == "mpi" and r.forms["stderr"] is None
    assert {m.rank for m in events if m.name == "loss"} == {1, None}


def test_a_truncated_line_keeps_its_flag_in_its_ranks_block():
    seen = []

    class Spy:
        name, description = "spy", "records blocks"

        def feed(self, block):
            seen.append(block)
            return []

        def finish(self):
            return []

    r = RankRouter(Spy, parse_rank_selection("all"))
    text = "".join(f"[default{i % 2}]:x\n" for i in range(16))
    r.feed(LineBlock(text, "stdout", 101, 16, 0.0, 0.0, (104,)))
    assert [(b.first_line, b.count, b.text, b.truncated) for b in seen][2:4] == [(103, 1, "x\n", ()), (104, 1, "x\n", (104,))]


@pytest.mark.parametrize("log", RANKED + [NUMBERED], ids=lambda p: p.name)
@pytest.mark.parametrize("ranks", ["0", "all"])
def test_live_and_replay_give_the_same_events(log, ranks):
    data = log.read_bytes()

    def events(pieces):
        """Through the pipeline, as a run and a replay feed it (it gives blocks their stream)."""
        sink, splitter = Collect(), LineSplitter("log")
        pipeline = Pipeline(router(ranks), sinks=[sink])
        for piece in pieces:
            block = splitter.feed(piece, 0.0, 0.0)
            if block is not None:
                pipeline.feed(block)
        block = splitter.finish(0.0, 0.0)
        if block is not None:
            pipeline.feed(block)
        pipeline.finish()
        return comparable(sink.events)

    whole = events([data])
    assert whole and events(data.splitlines(keepends=True)) == whole
    assert events([data[i:i + 7] for i in range(0, len(data), 7)]) == whole


@pytest.mark.parametrize("text, problem", [("", "must be all or rank numbers"), ("-1", "got '-1'"),
                                           ("0,", "got '0,'"), ("every", "got 'every'"), ("1.5", "got '1.5'")])
def test_a_bad_rank_selection_says_what_is_allowed(text, problem):
    with pytest.raises(ValueError, match=problem):
        parse_rank_selection(text)


def test_rank_selections_read_as_written():
    assert parse_rank_selection("all").every
    assert parse_rank_selection(" 0, 3 ").ranks == {0, 3} and not parse_rank_selection("0,3").includes(1)


def test_a_counter_is_not_taken_for_labels():
    ev = Evidence()
    for i in range(1, 41):
        ev.add(f"{i}: loss=0.5")
    assert not ev.decided  # from "10: " on, a label of another width: srun is ruled out, the lines are plain
    ev.add("41: loss=0.5")
    assert ev.decided and ev.form is None
    wide = Evidence()
    for i in range(100, 355):
        wide.add(f"{i}: loss=0.5")
    assert not wide.decided  # one width, no label twice: held until the window ends
    wide.add("355: loss=0.5")
    assert wide.decided and wide.form is None


def test_many_ranks_that_each_print_once_first_are_recognised():
    ev = Evidence()
    lines = [f"[1,{r}]<stdout>:host-{r // 8}" for r in range(64)] + [f"[1,{r}]<stdout>:step 1" for r in range(64)]
    for n, line in enumerate(lines, 1):
        ev.add(line)
        if ev.decided:
            break
    assert ev.form.name == "mpi" and n == 80


def test_lines_before_the_first_prefix_like_line_are_parsed_at_once():
    r = router("0", "generic")
    split = LineSplitter("log")
    assert [m.iteration for m in r.feed(split.feed(b"step=1 loss=0.5\nstep=2 loss=0.4\n", 0.0, 0.0))
            if m.name == "loss"] == [1, 2]  # an ordinary log's metrics are not held back
    assert r.feed(split.feed(b"3: step=3 loss=0.3\nstep=4 loss=0.2\n", 0.0, 0.0)) == []  # held from "3: " on
    assert [(m.iteration, m.line) for m in r.finish() if m.name == "loss"] == [(3, 3), (4, 4)]
    assert r.forms == {"log": None}


def test_torch_distributed_launch_warnings_before_the_ranks_do_not_hide_the_prefix():
    detr = REAL_LOGS / "pytorch" / "detr-metriclogger-ddp.log"
    if not detr.exists():
        pytest.skip(f"{detr} is absent (the shared real logs are not on this machine)")
    preamble = b"".join(detr.read_bytes().splitlines(keepends=True)[:13])  # launch.py's and torchrun's warnings
    r = router("0")
    events = feed_pieces(r, [preamble + TORCHRUN.read_bytes()])
    assert r.forms["log"].name == "torchrun"
    assert [(m.rank, m.value, m.line) for m in events][:2] == [(0, 2.30576, 13 + 9), (0, 1.8231, 13 + 11)]


@pytest.mark.parametrize("chunk", [97, 4096, 1 << 20])
def test_a_bar_line_left_open_under_a_rank_prefix_reaches_that_ranks_parser_in_any_chunking(chunk):
    # torchrun prefixes each physical line once; a tqdm bar redrawn 3,000 times with \r is one line,
    # long enough that the splitter hands its early states out before the line ends (an open line)
    head = b"".join(b"[default%d]:step=%d loss=0.%d\n" % (r, i, i) for i in range(1, 9) for r in (0, 1))
    bar = b"[default0]:" + b"".join(b"train:  %d/3000 [00:01<00:00, 9.1it/s, loss=%d.5]\r" % (i, i)
                                    for i in range(1, 3001)) + b"\n"
    tail = b"[default1]:step=9 loss=0.9\n[default0]:step=9 loss=0.9\n"
    data = head + bar + tail
    events = feed_pieces(router("0", "generic"), [data[i:i + chunk] for i in range(0, len(data), chunk)])
    assert {m.rank for m in events} == {0}
    losses = [(m.iteration, m.value, m.line, m.running) for m in events if m.name == "loss"]
    assert losses[:8] == [(i, float(f"0.{i}"), 2 * i - 1, False) for i in range(1, 9)]
    bar_values = [x for x in losses if x[2] == 17]
    assert len(bar_values) == 3000 and bar_values[0] == (1, 1.5, 17, True) and bar_values[-1] == (3000, 3000.5, 17, False)
    assert losses[-1] == (9, 0.9, 19, False)


class _OneMetricPerLine(LineParser):
    """A parser that leaves the stream to others (as most do): one metric per line."""

    name = "one-per-line"

    def parse_line(self, text, number, wall_time):
        return [Metric("x", float(number), None, "train", None, None, None, wall_time, number)]


@pytest.mark.parametrize("parser", [lambda: create_parser("generic", ParserOptions(year=2026)), _OneMetricPerLine])
def test_every_event_of_a_stderr_stream_says_stderr_through_the_router(parser):
    """The router writes the block's stream into what it returns (stamps_stream), in the copy that
    sets a rank, and for the unranked parser's events when that parser does not write it itself."""
    router = RankRouter(parser, parse_rank_selection("all"))
    assert router.stamps_stream
    ranked = "".join(f"[rank{r}]:step={i} loss=0.{i}{r}\n" for i in range(1, 9) for r in range(2))
    plain = "".join(f"step={i} loss=0.{i}\n" for i in range(1, 9))
    got = []
    for stream, text in (("stderr", ranked), ("log", plain)):
        sp = LineSplitter(stream)
        got += [(stream, ev) for ev in router.feed(sp.feed(text.encode(), 0.0, 1.0))]
    metrics = [(stream, ev) for stream, ev in got if type(ev) is Metric]
    assert {ev.rank for _, ev in metrics} == {0, 1, None}
    assert len(metrics) == 24  # 16 ranked lines, 8 plain ones: one value each
    assert all(ev.stream == stream for stream, ev in metrics)
