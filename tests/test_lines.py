"""The line splitter: identical lines whatever the chunking, bounded memory."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from trainvisor.stream.lines import LineSplitter, clean_text


def split_all(data: bytes, cuts: list[int], max_line: int = 1 << 20) -> list[tuple[int, str, bool]]:
    sp = LineSplitter("s", max_line=max_line)
    out = []
    pos = 0
    for c in sorted(set(cuts)) + [len(data)]:
        if c <= pos:
            continue
        block = sp.feed(data[pos:c], 0.0, 0.0)
        pos = c
        if block:
            out.extend((r.number, r.text, r.truncated) for r in block.records())
    block = sp.finish(0.0, 0.0)
    if block:
        out.extend((r.number, r.text, r.truncated) for r in block.records())
    return out


def test_line_endings_lf_crlf_and_unterminated_last_line():
    assert split_all(b"a\nb\r\nc", []) == [(1, "a", False), (2, "b", False), (3, "c", False)]


def test_carriage_return_progress_bar_hooks_see_its_final_state_and_every_state():
    # The terminal line model: a hook's text is still the final state (what split_all
    # reads), and the states a reader saw before it are there too (the parsers read each).
    data = b"epoch 1\n 1/3 [=>  ] loss: 0.9\r 2/3 [==> ] loss: 0.5\r 3/3 [===] loss: 0.2 - val_loss: 0.3\ndone\n"
    assert split_all(data, []) == [
        (1, "epoch 1", False),
        (2, " 3/3 [===] loss: 0.2 - val_loss: 0.3", False),
        (3, "done", False),
    ]
    (block,) = [LineSplitter("s").feed(data, 0.0, 0.0)]
    assert [r.states for r in block.records()][1] == (
        " 1/3 [=>  ] loss: 0.9", " 2/3 [==> ] loss: 0.5", " 3/3 [===] loss: 0.2 - val_loss: 0.3")


def test_crlf_split_across_chunks_is_one_line_ending():
    assert split_all(b"abc\r\ndef\r\n", [4]) == [(1, "abc", False), (2, "def", False)]


def test_long_line_is_cut_and_flagged_and_numbering_continues():
    data = b"x" * 100 + b"\nshort\n"
    assert split_all(data, [10, 50], max_line=16) == [(1, "x" * 16, True), (2, "short", False)]


def test_invalid_utf8_and_nul_bytes_are_replaced_not_fatal():
    rows = split_all(b"loss \xff\xfe = 1\x00\x00\nok\n", [6])
    assert rows[0][1] == "loss \ufffd\ufffd = 1\x00\x00"
    assert rows[1] == (2, "ok", False)


def test_ansi_sequences_and_backspaces_are_removed_for_parsing():
    assert clean_text("\x1b[1m 1/49\x1b[0m \x1b[37m====\x1b[0m") == " 1/49 ===="
    assert clean_text("ETA: 10s\b\b\b1s ") == "ETA: 1s "


def test_gap_keeps_line_numbers_right():
    sp = LineSplitter("s")
    b1 = sp.feed(b"one\ntw", 0, 0)
    sp.skip(newlines=2, ends_with_newline=False)  # "o\nthree\nfo" was never seen
    b2 = sp.feed(b"ur\nfive\n", 0, 0)
    assert [(r.number, r.text) for r in b1.records()] == [(1, "one")]
    assert [(r.number, r.text) for r in b2.records()] == [(5, "five")]


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\r", b"\r\n", b"\xff", b"\x00", b"\x1b[1m", b"xyz" * 7]), max_size=60).map(b"".join),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
    max_line=st.sampled_from([4, 16, 1 << 20]),
)
def test_chunking_never_changes_the_lines(data, cuts, max_line):
    assert split_all(data, cuts, max_line) == split_all(data, [], max_line)
