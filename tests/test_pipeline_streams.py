"""What a parser releases only at `finish` (a Rich bar waiting for continuation lines) says the
stream it came from: the one stream a replay reads ("log"), and, when a child's stdout and stderr
were both read, the stream the parser gave it (never the stream of whichever block came last)."""
from __future__ import annotations

from trainvisor.events import LineBlock, Metric
from trainvisor.stream.pipeline import Pipeline


class HoldsItsLastValue:
    """A parser that reads `loss=X` lines and holds the last value until finish, with its stream."""

    name = "holds"

    def __init__(self) -> None:
        self.held = None

    def feed(self, block):
        for i, text in enumerate(block.text.splitlines()):
            if text.startswith("loss="):
                self.held = Metric("loss", float(text[5:]), None, "train", None, None, None, 0.0,
                                   block.first_line + i, block.stream)
        return []

    def finish(self):
        return [self.held] if self.held else []


class Collect:
    name = "collect"

    def __init__(self) -> None:
        self.events = []

    def write(self, events):
        self.events += events

    def flush(self):
        pass

    def close(self):
        pass


def _run(blocks) -> list:
    sink = Collect()
    pipeline = Pipeline(HoldsItsLastValue(), sinks=[sink])
    for text, stream in blocks:
        pipeline.feed(LineBlock(text, stream, 1, text.count("\n"), 0.0, 0.0))
    pipeline.finish()
    return sink.events


def test_a_value_held_from_stdout_stays_stdout_when_stderr_spoke_last():
    (event,) = _run([("loss=0.5\n", "stdout"), ("a warning\n", "stderr")])
    assert (event.value, event.stream) == (0.5, "stdout")


def test_a_replay_reads_one_stream_and_what_is_released_at_the_end_says_it():
    (event,) = _run([("loss=0.25\n", "log"), ("done\n", "log")])
    assert (event.value, event.stream) == (0.25, "log")
