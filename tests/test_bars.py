"""Progress-bar states (tqdm, rich, Keras) read into BarState, and their postfix metrics in the generic parser."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings, strategies as st

from trainvisor.parsers import bars
from trainvisor.parsers.bars import BarState, StepValues, is_running, read_bar

from .parsing_helpers import FIXTURES, parse_file


@pytest.mark.parametrize("text,bar", [
    ("Epoch 0:  45%|████▌     | 45/100 [00:02<00:03, 19.5it/s, loss=0.231, v_num=0]",
     BarState("Epoch 0", 45, 100, (("loss", 0.231),), 19.5, 0)),
    ("train:  45%|####      | 45/100 [00:02<00:03,  2.00s/it, loss=0.231]",
     BarState("train", 45, 100, (("loss", 0.231),), 0.5, None)),
    ("eval: 45/100 [00:02<00:03, 19.5it/s, acc=0.5]", BarState("eval", 45, 100, (("acc", 0.5),), 19.5, None)),
    ("batches: 45it [00:02, 19.5it/s, loss=1e-3]", BarState("batches", 45, None, (("loss", 0.001),), 19.5, None)),
    ("  0%|          | 0/1677 [00:00<?, ?it/s]", BarState("", 0, 1677, (), None, None)),
    ("Epoch 3/9 ━━━━━━━━━━ 50/50 0:00:02 • 0:00:00 25.1it/s v_num: 0 train_loss: 0.231",
     BarState("Epoch 3/9", 50, 50, (("train_loss", 0.231),), 25.1, 3)),
    ("50/50 ━━━━━━━━━━ 1s 10ms/step - accuracy: 0.91 - loss: 0.23",
     BarState("", 50, 50, (("accuracy", 0.91), ("loss", 0.23)), 100.0, None)),
    ("  32/100 [=>....] - ETA: 1s - loss: 2.3000", BarState("", 32, 100, (("loss", 2.3),), None, None)),
    # real-logs keras/esartic-sound-cnn-30ep.log
    ("15635/15635 [==============================] - 8s 500us/step - loss: 0.9278 - acc: 0.6833 - val_loss: 1.6180",
     BarState("", 15635, 15635, (("loss", 0.9278), ("acc", 0.6833), ("val_loss", 1.618)), 2000.0, None)),
    # real-logs keras/keras3-utf16le-ansi.log line 34: Keras 3's ETA over a minute (and over an hour, as it formats it)
    (" 1/49 ━━━━━━━━━━━━━━━━━━━━ 1:06 1s/step - accuracy: 0.0000e+00 - loss: 1.5527",
     BarState("", 1, 49, (("accuracy", 0.0), ("loss", 1.5527)), 1.0, None)),
    ("  7/4900 ━━━━━━━━━━━━━━━━━━━━ 1:02:03 760ms/step - loss: 1.5",
     BarState("", 7, 4900, (("loss", 1.5),), 1 / 0.76, None)),
])
def test_bar_states_are_read(text, bar):
    assert read_bar(text) == bar


@pytest.mark.parametrize("text", ["step 100 [12:30:01] loss=3", "Epoch 1/10", "loss: 0.3 - acc: 0.9", "a | b | c",
                                  "1/49 ━━━━ 1:6 1s/step - loss: 1", "1/49 ━━━━ 1:06:03:01 1s/step - loss: 1"])
def test_lines_that_are_no_bar(text):
    assert read_bar(text) is None


def rows(name: str) -> list[tuple]:
    _, events = parse_file(FIXTURES / name, "generic")
    return [(m.name, m.value, m.iteration, m.phase, m.epoch, m.line, m.running) for m in events]


def test_tqdm_postfix_metrics_once_per_change_running_until_the_total():
    # 5 bar states on line 2 (loss 2.31 twice), the same final bar redrawn on line 3: 3 records;
    # v_num and the rate never; line 4's "\r" states and line 5's "\b" rewrite as plain pairs
    assert rows("tqdm-cr.log") == [
        ("loss", 2.31, 1, "train", 0.0, 2, True),
        ("loss", 1.87, 3, "train", 0.0, 2, True),
        ("loss", 1.52, 4, "train", 0.0, 2, False),
        ("acc", 0.5, None, "val", None, 4, False),
        ("acc", 0.75, None, "val", None, 4, False),
        ("loss", 0.9, None, "train", None, 5, False),
    ]


def test_rich_bar_states():
    assert rows("rich-bar.log") == [
        ("loss", 0.693, 1, "train", 0.0, 1, True),
        ("loss", 0.512, 3, "train", 0.0, 1, True),
        ("loss", 0.498, 4, "train", 0.0, 1, False),
    ]


def test_keras3_bar_states_and_the_epoch_end_line():
    assert rows("keras3-bar.log") == [
        ("accuracy", 0.25, 1, "train", None, 2, True), ("loss", 1.3863, 1, "train", None, 2, True),
        ("accuracy", 0.375, 2, "train", None, 2, True), ("loss", 1.3521, 2, "train", None, 2, True),
        ("accuracy", 0.4375, 4, "train", None, 2, False), ("loss", 1.3012, 4, "train", None, 2, False),
        ("accuracy", 0.4375, 4, "train", None, 3, False), ("loss", 1.3012, 4, "train", None, 3, False),
        ("accuracy", 0.5, 4, "val", None, 3, False), ("loss", 1.2001, 4, "val", None, 3, False),
    ]


def test_a_tqdm_bar_without_a_rate_still_gives_its_postfix():
    # tests/test_pty.py's child: a bar_format that shows no rate
    assert read_bar("Epoch 1: 33%|###| 1/3 [00:00<00:00, loss=0.8]") == BarState("Epoch 1", 1, 3, (("loss", 0.8),), None, 1)


# ---- read_bar's fast paths give the regexes' answers ----

# bars.py's tqdm forms as one anchored alternation, as read_bar searched them before it looked for "%|"
# and a "[" opening the times first: the reference the faster reading must agree with.
_REFERENCE_TQDM_RE = re.compile(
    r"^(?P<desc>.*?)(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<n>\d+)(?:/(?P<total>\d+))?\s*\[(?P<inner>[^\]]*)\]"
    r"|^(?P<desc2>.*?)(?P<n2>\d+)(?:/(?P<total2>\d+)|\w*)\s*\[(?P<inner2>[\d:]+(?:<[\d:?]+)?, [^\]]*/[^\]]*)\]")


def reference_tqdm(text: str):
    m = _REFERENCE_TQDM_RE.search(text)
    if m is None:
        return None
    if m.group("n") is not None:
        return m.group("desc"), m.group("n"), m.group("total"), m.group("inner")
    return m.group("desc2"), m.group("n2"), m.group("total2"), m.group("inner2")


def fast_tqdm(text: str):
    """What read_bar's tqdm forms read: (desc, n, total, inner), or None."""
    m = bars._tqdm_form(text)
    return None if m is None else (text[:m.start()], m.group("n"), m.group("total"), m.group("inner"))


TQDM_CORNERS = [
    "Epoch 0:  45%|████▌     | 45/100 [00:02<00:03, 19.5it/s, loss=0.231, v_num=0]",
    "1234%|x| 5/6 [a]", "12%|a|b| 3/4 [x] 5%| | 6 [y]", "5%|5%| 3/4 [x]", "a 5%|x|\n 3/4 [y]", "a\n5%|x| 3/4 [y]",
    "٣%| | 1/2 [x]", "x٣5%| | 1/2 [x]", "7%| | ٣/4 [x]", "7%|\u00a0| 3/4\u00a0[x]", "9%| |3/[x]", "9%| |3 [x]",
    "x 5/10 [00:01<00:02, 3.1it/s, loss=0.5]", "y: 5it [00:01, 3.0it/s, acc=1]", "5/10 [٣:1, a/b]", "3 [1:2<3?, a/b]",
    "5%| |\n3/4 [x] 5/10 [00:01<00:02, 3.1it/s]", "[0:1, /] 9%|", "",
]


@pytest.mark.parametrize("text", TQDM_CORNERS)
def test_the_tqdm_forms_read_what_the_one_regex_read(text):
    assert fast_tqdm(text) == reference_tqdm(text)


PIECES = st.sampled_from(["1", "23", "100", "%|", "|", "█", "#", " ", "/", "[", "]", ":", "<", "?", ", ", "it/s",
                          "\n", "٣", "a", "Epoch ", "=", "loss=0.5", "00:01", "\u00a0", "x"])


@settings(max_examples=500, deadline=None)
@given(st.lists(PIECES, max_size=40))
def test_random_text_reads_as_the_one_regex_read(pieces):
    text = "".join(pieces)
    assert fast_tqdm(text) == reference_tqdm(text)


def test_a_keras_time_per_step_too_small_to_scale_is_no_rate():
    """0.(320 zeros)1 us is a float, but 0 s once scaled: no rate, where it divided by zero."""
    text = "3/4 [==] - 1s 0." + "0" * 320 + "1us/step - loss: 1"
    assert read_bar(text) == BarState("", 3, 4, (("loss", 1.0),), None, None)


RATE_PIECES = st.sampled_from(["1", "9", "0", ".", "5", "it", "/s", "s/", "it/s", " ", "e", "-", "+", "nan", "inf", "٣", "?", "x"])


@pytest.mark.parametrize("text", ["15.82it/s", "15.it/s", ".5it/s", "1.5.it/s", "it/s", " 3.1it/s", "٣it/s", "0it/s", "1e5it/s",
                                  "2.11s/it", "?it/s", "0.0it/s", "00001.5it/s"])
def test_a_rate_read_without_the_regex_is_the_regexs(text):
    assert bars._rate(text) == bars._rate_by_regex(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(RATE_PIECES, max_size=8))
def test_random_rates_read_as_the_regex_reads_them(pieces):
    text = "".join(pieces)
    fast, regex = bars._rate(text), bars._rate_by_regex(text)
    assert fast == regex or (fast != fast and regex != regex)


# ---- the two rules every parser of bars follows ----

@pytest.mark.parametrize("text,running", [
    ("Epoch 0:  45%|████▌     | 45/100 [00:02<00:03, 19.5it/s, loss=0.231]", True),
    ("Epoch 0: 100%|██████████| 100/100 [00:05<00:00, 19.5it/s, loss=0.231]", False),
    ("batches: 45it [00:02, 19.5it/s, loss=1e-3]", True),  # no total: never reached
    ("5/6 ━━━━━━━━━━━━━━━━━━━━ 0s 17ms/step - accuracy: 0.5813 - loss: 0.6996", True),
    ("6/6 ━━━━━━━━━━━━━━━━━━━━ 0s 14ms/step - accuracy: 0.5781 - loss: 0.7002", False),
])
def test_a_bars_values_are_running_until_it_reaches_its_total(text, running):
    assert is_running(read_bar(text)) is running


# keras-every-step.log, line 2 (the last batch's bar) and line 6 (the epoch-end line): the same step
LAST_BATCH = "6/6 ━━━━━━━━━━━━━━━━━━━━ 0s 14ms/step - accuracy: 0.5781 - loss: 0.7002"
EPOCH_END = LAST_BATCH.replace("14ms", "20ms") + " - val_accuracy: 0.5000 - val_loss: 0.7036"


def test_a_redraw_at_the_same_step_gives_only_what_it_adds_or_changes():
    seen = StepValues()
    assert seen.new(6, read_bar(LAST_BATCH).postfix) == (("accuracy", 0.5781), ("loss", 0.7002))
    assert seen.new(6, read_bar(EPOCH_END).postfix) == (("val_accuracy", 0.5), ("val_loss", 0.7036))
    assert seen.new(6, read_bar(EPOCH_END.replace("0.7036", "0.7037")).postfix) == (("val_loss", 0.7037),)
    assert seen.new(6, read_bar(EPOCH_END).postfix) == (("val_loss", 0.7036),)


def test_a_new_step_or_bar_gives_every_value_again():
    seen = StepValues()
    seen.new(6, read_bar(LAST_BATCH).postfix)
    assert seen.new(12, read_bar(LAST_BATCH).postfix) == (("accuracy", 0.5781), ("loss", 0.7002))
    seen.forget()
    assert seen.new(12, read_bar(LAST_BATCH).postfix) == (("accuracy", 0.5781), ("loss", 0.7002))


def test_a_nan_drawn_again_at_its_step_is_no_new_value():
    seen = StepValues()
    assert len(seen.new(3, (("loss", float("nan")),))) == 1
    assert seen.new(3, (("loss", float("nan")), ("acc", 0.5))) == (("acc", 0.5),)
