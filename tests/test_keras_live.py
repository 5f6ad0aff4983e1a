"""Keras 3 as its users run it: every value of Keras's own record at its epoch and step, once.

Keras 3 draws its bar at the epoch's total twice: after the last batch, then the epoch-end line
repeating the train values with the ``val_*`` ones added. Those two drawings gave each epoch's
train values twice (at its last step), and no value said it was a running one.

- fixtures/logs/keras-every-step.log: `trainvisor run --log-file` of `keras_fit.py RECORD
  --every-step` through a pipe (Keras 3.15, torch 2.13 CPU): Keras's bar drawn at every step,
  ``\\r`` and runs of ``\\b`` between the drawings, ANSI codes, ModelCheckpoint's notes between
  the last batch's bar and the epoch-end line. HISTORY and STEPS are that run's record (Keras's
  `History` and the logs of each batch; seeded: every run records the same), as the bar prints
  them (4 decimals).
- Live runs (real Keras on the CPU build of torch), piped and on a terminal (`--pty`), compared
  with the record each run writes.
"""
from __future__ import annotations

import importlib.util
import json

import pytest

from trainvisor.events import Metric
from trainvisor.stream.lines import LineSplitter
from trainvisor.parsers import create_parser

from .conftest import real_logs
from .framework_runs import run_program
from .parsing_helpers import FIXTURES, chunked_events, parse_file

# not imported here: without KERAS_BACKEND=torch (the program sets it) keras looks for TensorFlow
live = pytest.mark.skipif(importlib.util.find_spec("keras") is None or importlib.util.find_spec("torch") is None,
                          reason="keras and torch are installed by `make test` (setup.cfg extra 'frameworks')")

LOG = FIXTURES / "keras-every-step.log"
NAMES = {"loss": ("loss", "train"), "accuracy": ("accuracy", "train"),
         "val_loss": ("loss", "val"), "val_accuracy": ("accuracy", "val")}
STEPS_PER_EPOCH = 6
HISTORY = {"accuracy": [0.5781, 0.5833, 0.5885], "loss": [0.7002, 0.6844, 0.6753],
           "val_accuracy": [0.5, 0.5625, 0.5938], "val_loss": [0.7036, 0.6921, 0.684]}
# (accuracy, loss) after each batch, steps 1..6 of epochs 1..3
STEPS = [[(0.5312, 0.7152), (0.5781, 0.7099), (0.5625, 0.716), (0.5703, 0.7084), (0.5813, 0.6996), (0.5781, 0.7002)],
         [(0.5625, 0.6948), (0.5625, 0.6884), (0.6042, 0.6751), (0.6016, 0.6825), (0.6062, 0.6784), (0.5833, 0.6844)],
         [(0.5625, 0.6861), (0.5781, 0.678), (0.5833, 0.6813), (0.5781, 0.6784), (0.5813, 0.6811), (0.5885, 0.6753)]]
# the log's lines: "Epoch E/3" at 1, 7, 13; each epoch's bar (steps 1..6) on the next; the epoch-end line 5 lines on
BAR_LINES, EPOCH_END_LINES = (2, 8, 14), (6, 12, 18)


def printed(value: float) -> float:
    """A value as Keras's bar prints it (Progbar: 4 decimals, or 4 digits in e-notation near 0)."""
    return float(f"{value:.4f}" if abs(value) > 1e-3 else f"{value:.4e}")


def epoch_records(history: dict, lines=None) -> list:
    """(name, phase, epoch, step, value[, line]) of each History value, sorted."""
    return sorted((*NAMES[key], float(e), e * STEPS_PER_EPOCH, printed(v)) + ((lines[e - 1],) if lines else ())
                  for key, values in history.items() for e, v in enumerate(values, 1))


def step_records(steps: list, lines=None) -> list:
    """(name, phase, epoch, step, value[, line]) of every batch's values but an epoch's last, sorted."""
    out = []
    for e, epoch in enumerate(steps, 1):
        for n, (acc, loss) in enumerate(epoch[:-1], 1):
            at = (float(e), (e - 1) * STEPS_PER_EPOCH + n)
            tail = (lines[e - 1],) if lines else ()
            out += [("accuracy", "train", *at, printed(acc)) + tail, ("loss", "train", *at, printed(loss)) + tail]
    return sorted(out)


def rows(metrics, running: bool, with_line: bool = True) -> list:
    return sorted((m.name, m.phase, m.epoch, m.iteration, m.value) + ((m.line,) if with_line else ())
                  for m in metrics if type(m) is Metric and m.running is running)


# ---- the saved log (the duplicate case) ----

def test_the_log_draws_each_epochs_last_bar_twice():
    """What made the duplicates: both drawings at 6/6 show the epoch's train values (the test below can fail)."""
    text = LOG.read_text(encoding="utf-8")
    assert text.count("\x1b[1m6/6\x1b[0m") == 3 * 2
    assert [text.count(f"accuracy: {acc:.4f} - loss: {loss:.4f}") for acc, loss in (e[-1] for e in STEPS)] == [2, 2, 2]


@pytest.mark.parametrize("parser", ["auto", "keras"])
def test_each_history_value_once_at_its_epoch_and_step_on_the_epoch_end_line(parser):
    chosen, events = parse_file(LOG, parser)
    assert getattr(chosen, "chosen", "keras") == "keras"
    assert rows(events, running=False) == epoch_records(HISTORY, EPOCH_END_LINES)


def test_every_earlier_step_is_a_running_value_on_its_bars_line():
    _, events = parse_file(LOG, "keras")
    assert rows(events, running=True) == step_records(STEPS, BAR_LINES)
    assert len(events) == 12 + 15 * 2 + 3  # the values above, once each, and the three checkpoints


def test_the_events_come_in_line_order_the_checkpoint_note_before_the_epoch_end_line():
    _, events = parse_file(LOG, "keras")
    assert [e.line for e in events] == sorted(e.line for e in events)
    assert [(e.path, e.line) for e in events if type(e) is not Metric] == [
        ("ckpt/model-01.keras", 3), ("ckpt/model-02.keras", 9), ("ckpt/model-03.keras", 15)]


@pytest.mark.parametrize("chunk", [0, 7, 97, 4096])
def test_the_same_records_whatever_the_pieces_the_output_arrives_in(chunk):
    assert chunked_events(LOG, "keras", chunk) == chunked_events(LOG, "keras", 1 << 20)


def test_a_line_on_another_stream_does_not_end_the_bar_held_at_its_total():
    """A warning on stderr between the last batch's bar and the epoch-end line is no Keras output."""
    lines = [line + b"\n" for line in LOG.read_bytes().split(b"\n")[:-1]]
    parser = create_parser("keras")
    out, out_split, err_split = [], LineSplitter("stdout"), LineSplitter("stderr")
    for text in lines[:2]:  # "Epoch 1/3", then epoch 1's bar: steps 1..6
        out += parser.feed(out_split.feed(text, 0.0, 0.0))
    out += parser.feed(err_split.feed(b"W1125 18:20:01.5 warnings.py:109] UserWarning: slow step\n", 0.0, 0.0))
    for text in lines[2:6]:  # ModelCheckpoint's notes and the epoch-end line
        out += parser.feed(out_split.feed(text, 0.0, 0.0))
    out += parser.finish()
    finals = [(m.name, m.phase, m.value, m.line, m.stream) for m in out if type(m) is Metric and not m.running]
    assert finals == [("accuracy", "train", 0.5781, 6, "stdout"), ("loss", "train", 0.7002, 6, "stdout"),
                      ("accuracy", "val", 0.5, 6, "stdout"), ("loss", "val", 0.7036, 6, "stdout")]


@pytest.mark.parametrize("after,released", [
    (b"Saved the model to model.keras\n", True),  # the program's next line: Keras is done with the bar
    (b"\nEpoch 3: early stopping\n", False),  # a callback's note: the epoch-end line may still come
])
def test_the_last_epochs_values_come_with_the_programs_next_line(after, released):
    parser = create_parser("keras")
    split = LineSplitter("stdout")
    events = parser.feed(split.feed(LOG.read_bytes() + after, 0.0, 0.0))
    last = [(m.name, m.phase, m.value) for m in events if type(m) is Metric and m.epoch == 3.0 and not m.running]
    assert last == ([("accuracy", "train", 0.5885), ("loss", "train", 0.6753), ("accuracy", "val", 0.5938),
                     ("loss", "val", 0.684)] if released else [])
    assert len([m for m in parser.finish() if m.epoch == 3.0]) == (0 if released else 4)


def test_an_epoch_of_unknown_length_gives_running_values_at_keras_count():
    """Keras 3.15 over a PyDataset without a length (a project run): its first epoch's bar shows
    ``n/Unknown`` and no total, until the epoch-end line draws it with the count it learnt."""
    bar = "\x1b[1m0s\x1b[0m 25ms/step - accuracy: {} - loss: {}"
    text = ("Epoch 1/2\n\r      1/Unknown " + bar.format("0.4375", "0.7591") + "\b\b\b\r      2/Unknown "
            + bar.format("0.4531", "0.7476") + "\n")
    events = parser_events(text.encode())
    assert [(m.name, m.value, m.iteration, m.epoch, m.running) for m in events] == [
        ("accuracy", 0.4375, 1, 1.0, True), ("loss", 0.7591, 1, 1.0, True),
        ("accuracy", 0.4531, 2, 1.0, True), ("loss", 0.7476, 2, 1.0, True)]


def parser_events(data: bytes) -> list:
    parser, split = create_parser("keras"), LineSplitter("stdout")
    return parser.feed(split.feed(data, 0.0, 0.0)) + parser.finish()


def test_an_older_keras_whose_last_batch_shows_an_average_gives_the_epoch_end_lines_value():
    """keras3-utf16le-ansi.log (Keras 3 averaging its bar's values): epoch 60's "49/49" rows, line 3150
    (the last batch: accuracy 0.8665, loss 0.4237) and 3151 (epoch end: 0.8605, 0.4159, val_...)."""
    _, events = parse_file(real_logs("keras") / "keras3-utf16le-ansi.log", "keras")
    last = [(m.name, m.phase, m.value, m.line) for m in events if m.epoch == 60.0 and not m.running]
    assert last == [("accuracy", "train", 0.8605, 3151), ("loss", "train", 0.4159, 3151),
                    ("accuracy", "val", 0.8505, 3151), ("loss", "val", 0.53, 3151), ("learning_rate", "train", 1.25e-04, 3151)]
    assert {m.iteration for m in events if m.epoch == 60.0 and not m.running} == {60 * 49}


# ---- live runs ----

# What changes what a program prints, set for trainvisor and Keras, never inherited.
CHILD_ENV = {"COLUMNS": "80", "TERM": "dumb", "NO_COLOR": None, "FORCE_COLOR": None, "KERAS_BACKEND": "torch"}


def assert_as_keras_records(run) -> None:
    """Every value of History at its epoch and step, once; every earlier step's values running;
    nothing else; the saved log replays to the same records."""
    record = json.loads((run.workdir / "record.json").read_text())
    steps = [[(s[2]["accuracy"], s[2]["loss"]) for s in record["steps"] if s[0] == e] for e in (1, 2, 3)]
    assert rows(run.metrics, running=False, with_line=False) == epoch_records(record["epochs"])
    assert rows(run.metrics, running=True, with_line=False) == step_records(steps)
    assert all(m.stream == "stdout" for m in run.metrics)
    parser, replayed = parse_file(run.log, "auto")
    assert parser.chosen == "keras"
    assert [m.without_wall_time() for m in replayed if type(m) is Metric] == [m.without_wall_time() for m in run.metrics]


@live
def test_keras_fit_through_a_pipe_as_keras_records_it_and_its_checkpoints_uploaded(tmp_path):
    store = tmp_path / "store"
    run = run_program(tmp_path, "keras_fit.py", "record.json", "--every-step",
                      flags=("--run-id", "k1", "--upload-to", f"file://{store}"), env={**CHILD_ENV, "COLUMNS": "40"})
    assert_as_keras_records(run)
    stored = sorted(p.name for p in (store / "k1").rglob("*.keras"))
    assert stored == ["model-01.keras", "model-02.keras", "model-03.keras"]
    assert all((store / "k1" / n).read_bytes() == (tmp_path / "ckpt" / n).read_bytes() for n in stored)


@live
def test_keras_fit_on_a_terminal_as_keras_records_it(tmp_path):
    run = run_program(tmp_path, "keras_fit.py", "record.json", "--every-step", flags=("--pty",),
                      env={**CHILD_ENV, "COLUMNS": "200", "TERM": "xterm-256color"})
    assert b"\b\r" in run.log.read_bytes()  # the bar was redrawn as on a terminal
    assert_as_keras_records(run)
