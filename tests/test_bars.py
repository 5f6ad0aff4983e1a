"""Progress-bar states (tqdm, rich, Keras) read into BarState, and their postfix metrics in the generic parser."""
from __future__ import annotations

import pytest

from trainvisor.parsers.bars import BarState, read_bar

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
])
def test_bar_states_are_read(text, bar):
    assert read_bar(text) == bar


@pytest.mark.parametrize("text", ["step 100 [12:30:01] loss=3", "Epoch 1/10", "loss: 0.3 - acc: 0.9", "a | b | c"])
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
