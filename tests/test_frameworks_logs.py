"""Lightning and plain-torch logs as their users see them, replayed from fixtures/logs/.

The fixtures are the saved output (`trainvisor run --log-file`, both streams) of the project's
own programs in fixtures/programs/, run with lightning 2.6 / torch 2.13 (CPU):

- lightning-rich.log: `lightning_metrics.py rich LOG` through a pipe: each epoch's final Rich
  bar, the values on continuation lines, launcher chatter on stderr between them;
- lightning-rich-pty.log: the same under `trainvisor run --pty` (the values on the bar's line);
- lightning-tqdm-steps.log: `lightning_metrics.py tqdm LOG steps` through a pipe: tqdm bars
  rewritten with ``\\r``, validation bars, the loss of every step on the bar;
- pytorch-mnist.log: `torch_mnist_style.py TRUTH` (the PyTorch MNIST example's prints).

The expected values are what Lightning's own CSVLogger wrote to metrics.csv in those runs
(rounded to the 3 digits the bar prints), and the torch program's own printed numbers.
"""
from __future__ import annotations

import pytest

from trainvisor.events import Metric
from trainvisor.stream.lines import clean_text
from trainvisor.parsers import create_parser

from .parsing_helpers import FIXTURES, chunked_events, parse_file, parse_text

RICH, RICH_PTY, TQDM, MNIST = (FIXTURES / n for n in (
    "lightning-rich.log", "lightning-rich-pty.log", "lightning-tqdm-steps.log", "pytorch-mnist.log"))

# metrics.csv of the three runs (epoch, step, value): identical, the runs are seeded
VAL_LOSS = [(0, 9, 0.511), (1, 19, 0.437), (2, 29, 0.394)]
VAL_ACC = [(0, 9, 0.833), (1, 19, 0.865), (2, 29, 0.896)]
TRAIN_LOSS = [(0, 9, 0.586), (1, 19, 0.450), (2, 29, 0.386)]
# train_loss_step of lightning-tqdm-steps.log's run, steps 0..29
STEP_LOSS = [0.679, 0.683, 0.672, 0.605, 0.570, 0.580, 0.576, 0.525, 0.496, 0.478,
             0.468, 0.529, 0.503, 0.438, 0.455, 0.456, 0.466, 0.413, 0.390, 0.378,
             0.388, 0.458, 0.430, 0.366, 0.400, 0.395, 0.410, 0.357, 0.335, 0.324]
# a step value at its epoch's last batch (10 an epoch) is not running: the rule of bars.BarMetrics
LAST_BATCH = {9, 19, 29}


def epoch_rows(events) -> set:
    """(name, phase, epoch, step, value) of the per-epoch (not running) records."""
    return {(e.name, e.phase, e.epoch, e.iteration, e.value) for e in events if type(e) is Metric and not e.running}


def lightning_rows(train_name: str = "loss") -> set:
    rows = {("loss", "val", float(ep), step, v) for ep, step, v in VAL_LOSS}
    rows |= {("acc", "val", float(ep), step, v) for ep, step, v in VAL_ACC}
    return rows | {(train_name, "train", float(ep), step, v) for ep, step, v in TRAIN_LOSS}


def last_batch_steps() -> set:
    """train_loss_step at each epoch's last batch: a finished step's value, not a running one."""
    return {("loss_step", "train", float(step // 10), step, STEP_LOSS[step]) for step in LAST_BATCH}


@pytest.mark.parametrize("path,train_name", [(RICH, "loss"), (RICH_PTY, "loss"), (TQDM, "loss_epoch")])
@pytest.mark.parametrize("parser", ["auto", "lightning"])
def test_each_epoch_as_lightning_records_it_and_no_launcher_chatter(path, train_name, parser):
    chosen, events = parse_file(path, parser)
    assert getattr(chosen, "chosen", "lightning") == "lightning"
    steps = last_batch_steps() if path == TQDM else set()
    assert epoch_rows(events) == lightning_rows(train_name) | steps  # nor v_num, `using: 0`, `max_epochs=3`


def test_rich_values_are_read_from_the_continuation_lines_of_their_bar():
    _, events = parse_file(RICH, "lightning")
    bars = [i + 1 for i, line in enumerate(RICH.read_text(encoding="utf-8").splitlines()) if line.startswith("Epoch ")]
    assert bars == [5, 9, 14]  # the chatter of stderr sits between two epochs' bars
    # each value on the line it is on: val_loss, val_acc, train_loss below each bar
    assert [(e.name, e.phase, e.line) for e in events] == [
        row for bar in bars for row in (("loss", "val", bar + 1), ("acc", "val", bar + 2), ("loss", "train", bar + 3))]


def test_a_programs_own_validation_print_is_no_validation_bar():
    text = RICH.read_text(encoding="utf-8").replace("Epoch ", "Validation loss: 0.123 (printed by the program)\nEpoch ")
    assert epoch_rows(parse_text(text, "lightning")) == lightning_rows()


def test_tqdm_step_values_reported_today_are_lightnings_own():
    """Only each line's final state reaches the parser today: a few steps' values, each right."""
    _, events = parse_file(TQDM, "lightning")
    running = [(e.name, e.epoch, e.iteration, e.value) for e in events if type(e) is Metric and e.running]
    assert running and all((name, epoch, value) == ("loss_step", float(step // 10), STEP_LOSS[step])
                           for name, epoch, step, value in running)


def states_one_by_one(path, parser) -> list:
    """The parser fed each ``\\r``-rendered state of every line, with the line's number: what
    `LineParser.feed_lines` does once a line holds all its states (the terminal line model)."""
    out = []
    data = path.read_bytes().decode("utf-8", "replace")
    for number, line in enumerate(data.split("\n")[:-1], 1):
        for state in line.split("\r"):
            state = clean_text(state)
            if state:
                out.extend(parser.parse_line(state, number, 0.0) or [])
    return out + parser.finish()


@pytest.mark.parametrize("path", [TQDM, RICH_PTY])
def test_every_rendered_state_gives_the_same_epochs_as_the_final_states(path):
    _, final_states = parse_file(path, "lightning")
    every_state = states_one_by_one(path, create_parser("lightning"))
    keep = ("name", "phase", "epoch", "iteration", "value")  # lines may differ: stderr cut into a bar's line
    assert ([tuple(getattr(e, k) for k in keep) for e in every_state if not e.running]
            == [tuple(getattr(e, k) for k in keep) for e in final_states if type(e) is Metric and not e.running])


def test_every_rendered_state_gives_each_steps_running_value_once():
    events = states_one_by_one(TQDM, create_parser("lightning"))
    steps = [(e.name, e.epoch, e.iteration, e.value, e.running) for e in events if e.name == "loss_step"]
    assert steps == [("loss_step", float(step // 10), step, v, step not in LAST_BATCH) for step, v in enumerate(STEP_LOSS)]


def test_replay_reports_each_steps_running_value():
    _, events = parse_file(TQDM, "lightning")
    steps = [(e.epoch, e.iteration, e.value, e.running) for e in events if type(e) is Metric and e.name == "loss_step"]
    assert steps == [(float(step // 10), step, v, step not in LAST_BATCH) for step, v in enumerate(STEP_LOSS)]


MNIST_TRAIN = {1: [0.730694, 0.593182, 0.477869, 0.439459, 0.514309],
               2: [0.426652, 0.391889, 0.310992, 0.312709, 0.419753],
               3: [0.350610, 0.322799, 0.249815, 0.257420, 0.377923]}
MNIST_TEST = {1: (0.4110, 230), 2: (0.3400, 238), 3: (0.3042, 238)}  # average loss, correct of 256


@pytest.mark.parametrize("parser", ["auto", "pytorch"])
def test_torch_steps_increase_across_epochs_and_the_test_set_is_test(parser):
    chosen, events = parse_file(MNIST, parser)
    assert getattr(chosen, "chosen", "pytorch") == "pytorch"
    train = [(e.epoch, e.iteration, e.value) for e in events if e.phase == "train"]
    # samples seen since training began: (epoch - 1) * 640 + the line's sample offset
    assert train == [(float(ep), (ep - 1) * 640 + 128 * i, v) for ep, vs in MNIST_TRAIN.items() for i, v in enumerate(vs)]
    test = [(e.name, e.epoch, e.iteration, e.value) for e in events if e.phase == "test"]
    assert test == [row for ep, (loss, correct) in MNIST_TEST.items()
                    for row in (("loss", float(ep), ep * 640, loss), ("accuracy", float(ep), ep * 640, correct / 256))]
    assert not [e for e in events if e.phase == "val"]


@pytest.mark.parametrize("path,parser", [(RICH, "auto"), (RICH, "lightning"), (RICH_PTY, "auto"), (TQDM, "auto"),
                                         (TQDM, "lightning"), (MNIST, "auto"), (MNIST, "pytorch")])
@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_live_equals_replay(path, parser, chunk):
    whole = chunked_events(path, parser, 1 << 30)
    assert whole and chunked_events(path, parser, chunk) == whole
    assert chunked_events(path, parser, 0) == whole  # one line (or one \r state) per read
