"""The terminal line model: every state a reader saw of a rewritten line reaches the parsers,
with the line's one number, whatever the chunking; an open line's states stay bounded."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from trainvisor.events import LineRecord, Metric
from trainvisor.stream.lines import LineSplitter
from trainvisor.parsers import ParserOptions, create_parser
from trainvisor.parsers.base import LineParser
from trainvisor.stream.pipeline import Pipeline
from trainvisor.stream.terminal import clean_text, overwrite

from .caffe_helpers import Collect
from .parsing_helpers import FIXTURES, feed_pieces


def blocks_of(data: bytes, size: int, **kw) -> list:
    sp = LineSplitter("s", **kw)
    pieces = [data[i:i + size] for i in range(0, len(data), size)] if size else [data]
    blocks = [sp.feed(p, 0.0, 0.0) for p in pieces] + [sp.finish(0.0, 0.0)]
    return [b for b in blocks if b is not None]


class StateLog(LineParser):
    """Records what `feed_lines` offers: (line number, state)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, str]] = []

    def parse_line(self, text, number, wall_time):
        self.seen.append((number, text))


def states(data: bytes, size: int = 0, **kw) -> list[tuple[int, str]]:
    parser = StateLog()
    for block in blocks_of(data, size, **kw):
        parser.feed(block)
    return parser.seen


def test_each_carriage_return_state_is_offered_with_the_lines_one_number():
    data = b"epoch 1\n 1/3 loss: 0.9\r 2/3 loss: 0.5\r 3/3 loss: 0.2\ndone\n"
    assert states(data) == [(1, "epoch 1"), (2, " 1/3 loss: 0.9"), (2, " 2/3 loss: 0.5"), (2, " 3/3 loss: 0.2"),
                            (3, "done")]
    (block,) = blocks_of(data, 0)
    assert block.count == 3 and block.text.split("\n")[1] == " 1/3 loss: 0.9\r 2/3 loss: 0.5\r 3/3 loss: 0.2"


def test_a_shorter_rewrite_leaves_the_tail_of_the_longer_state():
    # a terminal shows "loss=0.9" written over "loss=0.12345" as "loss=0.92345"
    assert states(b"loss=0.12345\rloss=0.9\n") == [(1, "loss=0.12345"), (1, "loss=0.92345")]


def test_backspaces_move_the_cursor_and_later_characters_overwrite():
    assert states(b"abc\b\bX\n") == [(1, "aXc")]  # nothing erased: "c" stays
    assert overwrite("", "ETA: 10s\b\b\b1s ") == "ETA: 1s "
    # Keras 1: backspaces over the whole bar, a \r, the next bar
    assert states(b"1/2 [=>.] - loss: 0.9" + b"\b" * 21 + b"\r2/2 [===] - loss: 0.5\n") == [
        (1, "1/2 [=>.] - loss: 0.9"), (1, "2/2 [===] - loss: 0.5")]


def test_consecutive_equal_states_count_once_and_crlf_is_a_line_ending():
    assert states(b"a=1\ra=1\r\ra=2\r\n\rb=3\r\n") == [(1, "a=1"), (1, "a=2"), (2, "b=3")]


def test_a_dict_before_a_bar_on_the_same_line_reaches_the_parser():
    # Hugging Face TRL: the logged dict, then tqdm redraws that line (real-logs llama-sft-trl-tqdm-cr.log)
    data = (b"{'loss': '0.7535', 'epoch': '0.8591'}\r 29%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x8a| 480/1677 [13:29<33:19]"
            b"\r 29%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x8a| 481/1677 [13:30<33:12]\n")
    events = feed_pieces(create_parser("huggingface"), [data])
    assert [(m.name, m.value, m.epoch, m.line) for m in events] == [("loss", 0.7535, 0.8591, 1)]


def test_the_tail_a_shorter_bar_leaves_of_a_dict_is_not_read_as_the_dict_again():
    data = (b"{'loss': '0.7535', 'grad_norm': '0.1377', 'entropy': '0.8505', 'epoch': '0.8591'}"
            b"\r 29%|#  | 480/1677 [13:29<33:19]\r 29%|#  | 481/1677 [13:30<33:12]\n")
    assert states(data)[1] == (1, " 29%|#  | 480/1677 [13:29<33:19]'0.1377', 'entropy': '0.8505', 'epoch': '0.8591'}")
    events = feed_pieces(create_parser("huggingface"), [data])
    assert [(m.name, m.value) for m in events] == [("loss", 0.7535), ("grad_norm", 0.1377), ("entropy", 0.8505)]


def test_ansi_escapes_are_removed_in_every_state():
    assert states(b"\x1b[32mval\x1b[0m acc=0.5\r\x1b[32mval\x1b[0m acc=0.75\n") == [
        (1, "val acc=0.5"), (1, "val acc=0.75")]


def test_hooks_see_the_final_state_and_the_states():
    seen: list[LineRecord] = []
    pipeline = Pipeline(create_parser("generic"), sinks=[Collect()], hooks=[seen.append])
    for block in blocks_of(b"plain\nx=1\rx=2\n", 3):
        pipeline.feed(block)
    pipeline.finish()
    assert [(r.number, r.text, r.states) for r in seen] == [(1, "plain", ()), (2, "x=2", ("x=1", "x=2"))]
    assert pipeline.stats.lines == 2


def test_an_open_line_hands_its_older_states_out_past_the_budget_and_is_counted_once():
    bar = b"".join(b"\rstep %05d" % i for i in range(400)) + b"\nend\n"
    expected = [(1, "step %05d" % i) for i in range(400)] + [(2, "end")]
    for size in (1, 7, 64, 0):
        blocks = blocks_of(bar, size, state_budget=100)
        assert states(bar, size, state_budget=100) == expected, size
        assert sum(b.count for b in blocks) == 2
    early = [b for b in blocks_of(bar, 7, state_budget=100) if b.open_line]
    assert early and all(b.count == 0 and b.first_line == 1 for b in early)
    # held at any time: about the budget, not the line
    sp = LineSplitter("s", state_budget=100)
    for i in range(0, len(bar) - 5, 7):
        sp.feed(bar[i:i + 7], 0.0, 0.0)
        assert sp._open.size <= 100 + len("step 00000")


def test_a_long_open_line_of_states_is_cut_like_any_long_line():
    blocks = blocks_of(b"x" * 50 + b"\rshort\r" + b"y" * 40 + b"\nok\n", 9, max_line=16)
    assert states(b"x" * 50 + b"\rshort\r" + b"y" * 40 + b"\nok\n", 9, max_line=16) == [(1, "x" * 16), (2, "ok")]
    assert [b.truncated for b in blocks if b.truncated] == [(1,)]


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bcd", b"\n", b"\r", b"\r\n", b"\b", b"\xe2\x96\x88", b"\x1b[1m", b"xyz" * 7, b"w" * 300,
                                   b"\x1b[2K", b"\x1b[K", b"\x1b[1K", b"\x1b[1A", b"\x1b[F", b"\x1b[2B", b"\x1b[3D", b"\x1b[5G"]),
                  max_size=80).map(b"".join),
    size=st.integers(min_value=1, max_value=40),
    max_line=st.sampled_from([4, 16, 1 << 20]),
    budget=st.sampled_from([8, 1 << 16]),
)
def test_chunking_never_changes_the_states(data, size, max_line, budget):
    whole = states(data, 0, max_line=max_line, state_budget=budget)
    assert states(data, size, max_line=max_line, state_budget=budget) == whole
    assert sum(b.count for b in blocks_of(data, size, max_line=max_line)) == sum(
        b.count for b in blocks_of(data, 0, max_line=max_line))


FIXTURE_PARSERS = [("tqdm-cr.log", "generic"), ("tqdm-cr.log", "huggingface"), ("keras3-bar.log", "generic"),
                   ("keras3-bar.log", "keras"), ("rich-bar.log", "generic"), ("tqdm-cr.log", "auto")]


@pytest.mark.parametrize("name,parser", FIXTURE_PARSERS)
def test_live_equals_replay_for_rewritten_lines(name, parser):
    data = (FIXTURES / name).read_bytes()

    def events(size: int) -> list:
        pieces = [data[i:i + size] for i in range(0, len(data), size)] if size else [data]
        return [e._replace(wall_time=0.0) for e in feed_pieces(create_parser(parser, ParserOptions(year=2026)), pieces)]

    whole = events(0)
    assert whole
    assert events(1) == whole and events(7) == whole


def test_caffe_reads_every_state_in_c_and_in_python(monkeypatch):
    glog = b"I0101 10:00:0%d.000000  1 solver.cpp:228] Iteration %d, loss = 0.%d"
    data = b"\r".join(glog % (i, i * 10, i) for i in range(1, 4)) + b"\n" + glog % (4, 40, 4) + b"\n"
    c_events = feed_pieces(create_parser("caffe", ParserOptions(year=2026)), [data])
    monkeypatch.setenv("TRAINVISOR_PURE_PYTHON", "1")
    py_events = feed_pieces(create_parser("caffe", ParserOptions(year=2026)), [data])
    got = [(m.name, m.iteration, m.value, m.line) for m in c_events if type(m) is Metric]
    assert got == [("total_loss", 10, 0.1, 1), ("total_loss", 20, 0.2, 1), ("total_loss", 30, 0.3, 1), ("total_loss", 40, 0.4, 2)]
    assert [(m.name, m.iteration, m.value, m.line) for m in py_events if type(m) is Metric] == got


def test_auto_chooses_and_parses_the_same_when_an_open_bar_passes_the_budget_while_it_holds_lines():
    # a tqdm bar of 2000 redraws (about 120k characters of states, past the 64 Ki budget) with no
    # newline, while `auto` still holds lines: its early states must not make the choice depend on chunking
    head = b"".join(b"warmup %d\n" % i for i in range(20))
    bar = b"".join(b"\rEpoch 0: %3d%%|#   | %d/9000 [00:01<00:02, 9.0it/s, loss=%d.5]" % (i * 100 // 9000, i, i % 7)
                   for i in range(1, 2001))
    data = head + bar + b"\n" + b"".join(b"x=%d\n" % i for i in range(10))
    runs = {}
    for size in (0, 1, 7, 4096):
        parser = create_parser("auto", ParserOptions())
        pieces = [data[i:i + size] for i in range(0, len(data), size)] if size else [data]
        runs[size] = (parser, [e._replace(wall_time=0.0) for e in feed_pieces(parser, pieces)])
    whole = runs[0][1]
    assert runs[0][0].chosen == "lightning" and len(whole) == 2000 and {m.line for m in whole} == {21}
    assert all(events == whole and parser.chosen == "lightning" for parser, events in runs.values())


def test_short_rewrites_of_a_very_long_row_keep_a_bounded_stale_tail():
    # 2000 one-character rewrites of a 100k-character row: each state is what the rewrite
    # wrote plus at most 256 columns of the old row, not the whole row again
    data = b"x" * 100_000 + b"".join(b"\r%d" % (i % 2) for i in range(2000)) + b"\n"
    seen = states(data, 4096)
    assert seen[0] == (1, "x" * 100_000)
    assert seen[1:3] == [(1, "0" + "x" * 256), (1, "1" + "x" * 256)] and len(seen) == 2001
    assert seen == states(data)


def test_a_rewrite_that_changes_nothing_gives_no_state_even_on_a_row_past_the_stale_tail():
    # tests/test_parsers_tables.py's yolox-eval.log: CRLF lines over 256 columns, fed byte by byte
    row = b"epoch: 1/2, " + b"x" * 300
    for size in (1, 0):
        assert states(row + b"\r\n" + row + b"\r\r\b\r\n", size) == [(1, row.decode()), (2, row.decode())]


# Erase and cursor sequences: each expected state is the row a terminal (xterm, tmux) shows
# under the cursor, with `\n` starting a line at column 0 as the user's terminal does.

def test_erase_line_after_a_carriage_return_leaves_no_tail_of_the_longer_row():
    # Rich on a terminal: `\r ESC[2K` before each redraw; 0.925 over 0.925863 shows 0.925
    assert states(b"acc: 0.925863 loss: 0.2\r\x1b[2Kacc: 0.925\n") == [(1, "acc: 0.925863 loss: 0.2"), (1, "acc: 0.925")]


@pytest.mark.parametrize("erase,shown", [
    (b"\x1b[K", "abc"), (b"\x1b[0K", "abc"),  # from the cursor to the end of the row
    (b"\x1b[1K", "    ef"),  # from the start through the cursor: blanks, the rest stays
    (b"\x1b[2K", ""),  # the whole row; the cursor stays where it was
])
def test_each_erase_in_line_as_a_terminal_shows_it(erase, shown):
    # "abcdef", three columns back (cursor on "d"), the erase
    assert states(b"abcdef\x1b[3D" + erase + b"\n") == [(1, shown)]  # an empty row is an empty line


def test_text_after_an_erase_is_written_where_the_cursor_stayed():
    assert states(b"abcdef\x1b[3D\x1b[1KX\n") == [(1, "   Xef")]
    assert states(b"abcdef\x1b[2KX\n") == [(1, "      X")]  # ESC[2K does not move the cursor
    assert states(b"abc\x1b[5GX\r\x1b[Cy\n") == [(1, "abc X"), (1, "ayc X")]  # to column 5; one forward


def test_a_cursor_up_rewrite_is_a_state_of_the_row_it_writes_not_mixed_with_the_line_below():
    # tqdm's nested bars: the inner bar on the line, `ESC[A`, the outer bar rewritten above it
    data = b"\router  1%\n\rinner 10% long\x1b[A\router  2%\n\rinner 20% long\x1b[A\router  3%\n"
    assert states(data) == [(1, "outer  1%"), (2, "inner 10% long"), (2, "outer  2%"),
                            (3, "inner 20% long"), (3, "outer  3%")]


def test_rich_multi_row_redraw_goes_up_erasing_each_row():
    # Rich's Live with a two-row display: `\r ESC[2K (ESC[1A ESC[2K)` then both rows again
    data = (b"Epoch 0/2 1/10 v_num: 0.000\nValidation 1/3 long padding      \r\x1b[2K\x1b[1A\x1b[2K"
            b"Epoch 0/2 10/10 val_loss: 0.511\nValidation 2/3\n")
    assert states(data) == [(1, "Epoch 0/2 1/10 v_num: 0.000"), (2, "Validation 1/3 long padding      "),
                            (2, "Epoch 0/2 10/10 val_loss: 0.511"), (3, "Validation 2/3")]


def test_cursor_moves_keep_the_rows_they_leave_and_stay_within_the_lines_rows():
    # down again onto the row left: its text is still there (`F`/`E` also go to column 0)
    assert states(b"abcdef\x1b[Fup\x1b[EX\n") == [(1, "abcdef"), (1, "up"), (1, "Xbcdef")]
    # a line's own row is its lowest: a move down from it stays there
    assert states(b"abc\x1b[3Bd\n") == [(1, "abcd")]
    # far up: at most MAX_ROWS rows above the line's row, then back down to it
    assert states(b"abc\x1b[999Ax\x1b[32By\n") == [(1, "abc"), (1, "   x"), (1, "abc y")]


def test_a_line_without_a_carriage_return_gives_the_same_states_whichever_way_it_is_read():
    # the splitter renders a complete line without `\r` through clean_text, an open one through OpenLine
    data = b"plain\nabc\x1b[1Adef\x1b[1Bgh\nend\n"
    assert states(data) == [(1, "plain"), (2, "abc"), (2, "   def"), (2, "abc   gh"), (3, "end")]
    for size in (1, 3, 7):
        assert states(data, size) == states(data)


@pytest.mark.parametrize("name", ["lightning-rich-pty.log", "lightning-rich-pty-80.log", "lightning-default-pty-200.log"])
def test_every_state_of_a_rich_terminal_redraw_is_text_rich_wrote_after_an_erase(name):
    # real `trainvisor run --pty` output of Lightning's Rich bar (80 columns: a row wrapped over 4
    # lines, redrawn going up `ESC[1A ESC[2K`, a validation row below it; the default bar: one row
    # redrawn shorter than the validation row that was on it): every state is a row Rich wrote,
    # none mixed with another row's text (ignoring the erase left the longer row's tail)
    data = (FIXTURES / name).read_bytes()
    written = {clean_text(piece) for piece in re.split(r"\r|\n|\x1b\[2K|\x1b\[1A", data.decode("utf-8"))}
    seen = [state for _, state in states(data)]
    assert len(seen) > 40 and all(state in written for state in seen if state)
    assert any(state.startswith("Epoch 0/2 ") for state in seen)
