"""Lightning's Rich bar at the widths users run it, replayed from fixtures/logs/.

The fixtures are the saved output (`trainvisor run --log-file`, both streams) of
fixtures/programs/lightning_metrics.py, run with lightning 2.6.6 / rich 15 (CPU):

- lightning-rich-60-12.log: `rich LOG epochs=12` through a pipe, COLUMNS=60: each bar's row wraps
  onto 7 continuation lines, every pair split (``val_loss:`` on one line, ``0.592`` on the next),
  the elapsed time wrapped beside ``0.000``;
- lightning-default-80-12.log: `default LOG epochs=12` (Lightning's own RichProgressBar()) through
  a pipe, COLUMNS=80: only the last epoch's bar is printed, and stderr's ```Trainer.fit` stopped``
  sits between two of its continuation lines;
- lightning-rich-pty-80.log: `rich LOG pace=0.05` under `trainvisor run --pty`, COLUMNS=80: the
  wrapped row redrawn after each batch with ``\\r ESC[2K`` and ``ESC[1A ESC[2K`` up each of its
  rows, a validation row drawn below it, each epoch's bar starting with the last epoch's values;
- lightning-default-pty-200.log: `default LOG pace=0.02` under `--pty`, COLUMNS=200: Lightning's
  default bar (one row, redrawn over its validation row) prints every epoch on a terminal.

The expected values are what Lightning's CSVLogger wrote to metrics.csv in those runs, rounded
to the 3 digits the bar prints (the 12-epoch runs are seeded alike: one metrics.csv).
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from trainvisor.events import Metric, Notice
from trainvisor.parsers import ParserOptions, create_parser
from trainvisor.parsers.lightning import NOTICE_RICH_FINAL_ONLY

from .parsing_helpers import FIXTURES, chunks, feed_pieces, parse_file, parse_text

WRAPPED, FINAL_ONLY, PTY = (FIXTURES / n for n in (
    "lightning-rich-60-12.log", "lightning-default-80-12.log", "lightning-rich-pty-80.log"))

# metrics.csv of the 12-epoch runs (4 batches an epoch: step 4 * epoch + 3)
VAL_LOSS_12 = [0.592, 0.538, 0.5, 0.471, 0.449, 0.431, 0.416, 0.403, 0.392, 0.382, 0.373, 0.366]
VAL_ACC_12 = [0.719, 0.76, 0.792, 0.823, 0.865, 0.875, 0.865, 0.865, 0.865, 0.865, 0.875, 0.885]
TRAIN_LOSS_12 = [0.639, 0.548, 0.489, 0.45, 0.421, 0.399, 0.382, 0.368, 0.357, 0.347, 0.338, 0.331]
# metrics.csv of the 3-epoch run (10 batches an epoch)
VAL_LOSS_3, VAL_ACC_3, TRAIN_LOSS_3 = [0.511, 0.437, 0.394], [0.833, 0.865, 0.896], [0.586, 0.450, 0.386]


def rows(val_loss, val_acc, train_loss, batches: int) -> list:
    """(name, phase, epoch, step, value) per epoch, in the order the bar shows them."""
    return [row for ep, values in enumerate(zip(val_loss, val_acc, train_loss))
            for row in zip(("loss", "acc", "loss"), ("val", "val", "train"), [float(ep)] * 3,
                           [ep * batches + batches - 1] * 3, values)]


def metrics(events) -> list:
    return [e for e in events if type(e) is Metric]


def assert_each_value_on_its_line(path, events) -> None:
    """`line` is the physical line the value is printed on (not the bar's first line)."""
    lines = path.read_bytes().decode("utf-8").split("\n")  # not read_text: it makes each \r a line end
    assert all(f"{e.value:.3f}" in lines[e.line - 1] for e in events)


def assert_every_epoch_once(path, parser: str, want: list) -> list:
    """The parser `auto` chooses (or `parser`) gives `want`, finished values each on its line; its metrics."""
    chosen, events = parse_file(path, parser)
    assert getattr(chosen, "chosen", "lightning") == "lightning"
    got = metrics(events)
    assert [(e.name, e.phase, e.epoch, e.iteration, e.value) for e in got] == want
    assert not any(e.running for e in got)
    assert_each_value_on_its_line(path, got)
    return got


@pytest.mark.parametrize("parser", ["auto", "lightning"])
def test_a_row_wrapped_at_60_columns_gives_every_epoch_once_each_value_on_its_line(parser):
    got = assert_every_epoch_once(WRAPPED, parser, rows(VAL_LOSS_12, VAL_ACC_12, TRAIN_LOSS_12, 4))
    # the values are on the even continuation lines of each 8-line row: 0.592 on line 8 (bar on 5)
    assert [e.line for e in got[:3]] == [8, 10, 12]


def test_the_last_epochs_bar_alone_gives_its_values_and_one_notice():
    chosen, events = parse_file(FINAL_ONLY, "auto")
    assert chosen.chosen == "lightning"
    (notice,) = [e for e in events if type(e) is Notice]
    assert (notice.code, notice.line) == (NOTICE_RICH_FINAL_ONLY, 5)  # the bar's line
    assert "--pty" in notice.message and "TQDMProgressBar" in notice.message and "metrics.csv" in notice.message
    # train_loss comes after another stream's line (`Trainer.fit` stopped), still the bar's
    got = [(e.name, e.phase, e.epoch, e.iteration, e.value, e.line) for e in metrics(events)]
    assert got == [("loss", "val", 11.0, 47, 0.366, 6), ("acc", "val", 11.0, 47, 0.885, 7),
                   ("loss", "train", 11.0, 47, 0.331, 9)]


def test_a_bar_whose_run_printed_every_epoch_gives_no_notice():
    for path in (WRAPPED, PTY, FIXTURES / "lightning-rich.log", FIXTURES / "lightning-tqdm-steps.log",
                 FIXTURES / "lightning-default-pty-200.log"):
        assert not [e for e in parse_file(path, "lightning")[1] if type(e) is Notice], path.name


@pytest.mark.parametrize("parser", ["auto", "lightning"])
def test_a_wrapped_row_redrawn_on_a_terminal_gives_every_epoch_once(parser):
    assert_every_epoch_once(PTY, parser, rows(VAL_LOSS_3, VAL_ACC_3, TRAIN_LOSS_3, 10))


def chunked(path, chunk: int) -> list:
    """The events `auto` gives for `path` read in `chunk`-byte pieces (0: a line a read), wall time left out."""
    data = path.read_bytes()
    pieces = data.splitlines(keepends=True) if chunk == 0 else chunks(data, chunk)
    return [replace(e, wall_time=0.0) if type(e) is Notice else e._replace(wall_time=0.0)
            for e in feed_pieces(create_parser("auto", ParserOptions(year=2026)), pieces)]


@pytest.mark.parametrize("path", [WRAPPED, FINAL_ONLY, PTY])
@pytest.mark.parametrize("chunk", [0, 1, 7, 4096])
def test_live_equals_replay(path, chunk):
    whole = chunked(path, 1 << 30)
    assert len(whole) == (4 if path == FINAL_ONLY else 36 if path == WRAPPED else 9)
    assert chunked(path, chunk) == whole


def test_a_programs_own_indented_line_after_a_bar_and_another_line_is_not_the_bars():
    # after a line that is not the bar's, a continuation is only a line as wide as the bar (Rich pads them)
    text = FINAL_ONLY.read_bytes().decode("utf-8").replace(
        "`Trainer.fit` stopped: `max_epochs=12` reached.\n",
        "`Trainer.fit` stopped: `max_epochs=12` reached.\n    lr: 0.1\n")
    events = parse_text(text, "lightning")
    assert [(e.name, e.phase, e.value) for e in metrics(events)] == [
        ("loss", "val", 0.366), ("acc", "val", 0.885), ("loss", "train", 0.331)]
