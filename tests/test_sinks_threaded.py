"""A sink that is not cheap runs on its own thread behind a bounded queue: its `write` never
blocks the pipeline (a batch that does not fit is dropped whole and counted), its failures are
counted, and at the end of the run a stuck sink is abandoned within one shared bound. No sleeps:
sinks block on Events the test releases."""
from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from trainvisor import Run, RunConfig
from trainvisor.config import LoggingConfig, ParsingConfig, RunDirConfig, SinksConfig
from trainvisor.sinks.threaded import CloseDeadline, CountingSink, SinkCounts, ThreadedSink
from trainvisor.summary import _sink_lines, format_summary

from .conftest import FAKE_CAFFE

WAIT = 30  # seconds a test waits for a thread it started before it fails (never slept)


class BlockingSink:
    """Blocks in `write` until `release` is set; says when a write has started."""

    name = "blocking"
    inline = False

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.batches: list[int] = []
        self.closed = False
        self.threads: set[str] = set()

    def write(self, events) -> None:
        self.threads.add(threading.current_thread().name)
        self.entered.set()
        assert self.release.wait(WAIT)
        self.batches.append(len(events))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class FailingSink(BlockingSink):
    """Raises on every batch whose first event is odd."""

    name = "failing"

    def write(self, events) -> None:
        if events[0] % 2:
            raise RuntimeError(f"cannot send batch starting at {events[0]}")
        self.batches.append(len(events))


def test_a_full_queue_drops_whole_batches_and_counts_their_records_exactly(caplog):
    sink = BlockingSink()
    threaded = ThreadedSink(sink, "blocking", capacity=5, deadline=CloseDeadline(WAIT))
    threaded.write([1, 2, 3])  # taken by the sink's thread, which blocks in it
    assert sink.entered.wait(WAIT)
    threaded.write([4, 5, 6])  # queued: 3 of 5
    threaded.write([7, 8])  # queued: 5 of 5
    threaded.write([9])  # full: dropped
    threaded.write([10, 11, 12, 13])  # dropped
    sink.release.set()
    threaded.close()
    assert sink.batches == [3, 3, 2] and sink.closed
    assert threaded.counts() == SinkCounts("blocking", written=8, dropped=5, failed=0, threaded=True)
    said = [r.getMessage() for r in caplog.records if "dropping" in r.getMessage()]
    assert said == ["sink blocking: its queue of 5 records is full (it writes slower than records come): "
                    "dropping what does not fit, counted; metrics.jsonl has every record"]  # once, not per batch


def test_a_failing_sink_is_counted_on_its_thread_and_never_raises_into_the_pipeline(caplog):
    sink = FailingSink()
    threaded = ThreadedSink(sink, "failing", capacity=100, deadline=CloseDeadline(WAIT))
    for start in (0, 1, 2, 3, 5):
        threaded.write(list(range(start, start + 4)))
    threaded.close()
    assert sink.batches == [4, 4] and sink.closed
    assert threaded.counts() == SinkCounts("failing", written=8, dropped=0, failed=12, threaded=True)
    assert "sink failing failed: RuntimeError: cannot send batch starting at 1" in caplog.text


def test_the_end_of_run_wait_is_one_bound_shared_by_all_threaded_sinks():
    now = [100.0]
    deadline = CloseDeadline(5.0, clock=lambda: now[0])
    assert deadline.remaining() == 5.0  # the first close starts it
    now[0] = 103.0
    assert deadline.remaining() == 2.0  # the second sink gets what the first left
    now[0] = 111.0
    assert deadline.remaining() == 0.0


def _config(tmp_path: Path, **sinks) -> RunConfig:
    command = (sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots")
    return RunConfig(command=command, parsing=ParsingConfig(parser="caffe", year=2026), sinks=SinksConfig(**sinks),
                     logging=LoggingConfig(quiet=True, summary=False), run=RunDirConfig(dir=str(tmp_path / "run")))


def _run(tmp_path: Path, config: RunConfig, sinks: list) -> tuple:
    with open(tmp_path / "out", "wb") as out:
        summary = Run(config, sinks=sinks, stdout_fd=out.fileno(), stderr_fd=out.fileno()).run()
    records = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    return summary, [json.loads(r) for r in records]


def test_a_sink_stuck_forever_neither_slows_parsing_nor_holds_the_exit(tmp_path):
    stuck = BlockingSink()
    try:
        summary, records = _run(tmp_path, _config(tmp_path, close_timeout=0.0), [stuck])
        assert stuck.entered.is_set() and stuck.batches == []
    finally:
        stuck.release.set()
    assert summary.exit_code == 0
    assert len(records) == summary.events == 111  # fake-caffe's generated log: every record in JSONL
    by_name = {c.name: c for c in summary.sinks}
    assert by_name["jsonl"] == SinkCounts("jsonl", written=111)
    assert by_name["blocking"] == SinkCounts("blocking", written=0, dropped=111, threaded=True, abandoned=True)
    assert "  sink blocking  0 written, 111 dropped (still busy at the end: abandoned)" in format_summary(summary)
    assert stuck.threads == {"trainvisor-sink-blocking"}


class Recorder:
    """A Python object passed to Run, as before the registry: no `inline` attribute."""

    name = "recorder"

    def __init__(self) -> None:
        self.records = 0
        self.threads: set[str] = set()

    def write(self, events) -> None:
        self.threads.add(threading.current_thread().name)
        self.records += len(events)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("inline, thread", [(None, "trainvisor-pipeline"), (False, "trainvisor-sink-recorder")])
def test_a_python_sink_runs_inline_unless_it_says_otherwise(tmp_path, inline, thread):
    recorder = Recorder()
    if inline is not None:
        recorder.inline = inline
    summary, records = _run(tmp_path, _config(tmp_path), [recorder])
    assert recorder.threads == {thread}
    assert recorder.records == len(records) == 111
    counts = {c.name: c for c in summary.sinks}["recorder"]
    assert (counts.written, counts.dropped, counts.failed, counts.threaded) == (111, 0, 0, inline is False)


class Raiser(Recorder):
    """An inline sink whose every write raises."""

    name = "raiser"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def write(self, events) -> None:
        self.calls += 1
        raise ValueError("no room")


def test_an_inline_sink_that_raises_is_counted_and_the_run_goes_on(tmp_path):
    raiser = Raiser()
    summary, records = _run(tmp_path, _config(tmp_path), [raiser])
    assert summary.exit_code == 0 and len(records) == 111
    counts = {c.name: c for c in summary.sinks}
    assert counts["raiser"] == SinkCounts("raiser", written=0, dropped=0, failed=111)
    assert counts["jsonl"] == SinkCounts("jsonl", written=111)
    assert summary.faults_by_component["sink raiser"] == raiser.calls > 0
    assert "  sink raiser    0 written, 111 failed (see the run log)" in format_summary(summary)


class CpuClockSink:
    """Each write "uses" `cost` CPU seconds of its thread on a fake CPU clock (or none: a sink
    waiting on the network); records the pauses the wrapper takes after each batch."""

    name = "costly"

    def __init__(self, cost: float) -> None:
        self.cost, self.cpu, self.batches = cost, 0.0, []

    def clock(self) -> float:
        return self.cpu

    def write(self, events) -> None:
        self.cpu += self.cost
        self.batches.append(len(events))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("cost, share, pause", [(0.010, 0.25, 0.030), (0.004, 0.5, 0.004), (0.0, 0.25, None),
                                                (0.010, 1.0, None)])
def test_a_busy_sink_pauses_in_proportion_to_its_cpu_and_never_at_the_end(cost, share, pause):
    # After a batch that took `cost` CPU seconds the thread pauses cost*(1-share)/share, so it
    # holds the interpreter at most `share` of the time; a sink that only waits (no CPU) and a
    # share of 1 never pause; after close nothing pauses (the rest is written at once).
    sink = CpuClockSink(cost)
    paused: list[float] = []
    done = threading.Event()

    def record_pause(seconds: float) -> None:
        paused.append(seconds)
        if len(paused) == 2:
            done.set()

    threaded = ThreadedSink(sink, "costly", capacity=100, deadline=CloseDeadline(WAIT), cpu_share=share,
                            cpu_clock=sink.clock, pause=record_pause)
    threaded.write([1, 2])
    threaded.write([3])
    if pause is not None:
        assert done.wait(WAIT)
        assert paused == [pytest.approx(pause), pytest.approx(pause)]
    threaded.close()
    before_close = len(paused)
    assert sink.batches == [2, 1] and threaded.counts().written == 3
    threaded.write([4])  # after close: dropped, counted, never paused for
    assert len(paused) == before_close and threaded.counts().dropped == 1
    if pause is None:
        assert paused == []


def test_each_sink_reports_the_cpu_its_writes_took_and_the_summary_names_a_costly_one():
    # CPU measured on the sink's own clock: 3 batches of 0.4 s on a thread, 2 of 0.3 s inline
    threaded_sink, inline_sink = CpuClockSink(0.4), CpuClockSink(0.3)
    threaded = ThreadedSink(threaded_sink, "costly", capacity=100, deadline=CloseDeadline(WAIT), cpu_share=1.0,
                            cpu_clock=threaded_sink.clock)
    inline = CountingSink(inline_sink, "cheap", cpu_clock=inline_sink.clock)
    for batch in ([1], [2], [3]):
        threaded.write(batch)
    inline.write([1])
    inline.write([2])
    threaded.close()
    costly, cheap = threaded.counts(), inline.counts()
    assert (costly.written, costly.cpu_seconds) == (3, pytest.approx(1.2))
    assert (cheap.written, cheap.cpu_seconds) == (2, pytest.approx(0.6))
    assert _sink_lines([costly, cheap]) == ["  sink costly    3 written; 1.2 s CPU", "  sink cheap     2 written"]


def test_the_threaded_sinks_share_one_cpu_budget_in_equal_parts(tmp_path):
    from trainvisor.run.build import build_sinks

    class Offloaded(CpuClockSink):
        inline = False

    def named(name):
        sink = Offloaded(0.0)
        sink.name = name
        return sink

    jsonl = CpuClockSink(0.0)
    sinks = build_sinks(SinksConfig(cpu_share=0.3), jsonl=jsonl, objects=[named("a"), named("b"), named("c")])
    assert [s.cpu_share for s in sinks if isinstance(s, ThreadedSink)] == [pytest.approx(0.1)] * 3
    unlimited = build_sinks(SinksConfig(cpu_share=1), jsonl=jsonl, objects=[named("a"), named("b")])
    assert [s.cpu_share for s in unlimited if isinstance(s, ThreadedSink)] == [1.0, 1.0]
    for s in sinks + unlimited:
        s.close()


def test_a_threaded_sinks_prepare_runs_on_its_thread_before_any_record():
    calls: list[tuple[str, str]] = []
    ready = threading.Event()

    class Slow(CpuClockSink):
        def prepare(self) -> None:
            calls.append(("prepare", threading.current_thread().name))
            ready.set()

        def write(self, events) -> None:
            calls.append(("write", threading.current_thread().name))

    threaded = ThreadedSink(Slow(0.0), "slow", capacity=10, deadline=CloseDeadline(WAIT))
    assert ready.wait(WAIT)  # no record given yet: prepared all the same
    threaded.write([1])
    threaded.close()
    assert calls == [("prepare", "trainvisor-sink-slow"), ("write", "trainvisor-sink-slow")]


def test_begin_close_lets_the_thread_drain_without_waiting_and_close_then_waits_once():
    sink = BlockingSink()
    threaded = ThreadedSink(sink, "blocking", capacity=10, deadline=CloseDeadline(WAIT))
    threaded.write([1, 2])  # taken by the thread, which blocks in it
    assert sink.entered.wait(WAIT)
    threaded.write([3, 4, 5])  # queued
    threaded.begin_close()  # returns at once though the sink is still blocked
    assert not sink.closed and sink.batches == []
    threaded.write([6])  # closing: dropped, counted
    sink.release.set()
    threaded.close()  # waits for the queued batch, the flush and the close
    assert sink.batches == [2, 3] and sink.closed
    threaded.close()  # idempotent
    assert threaded.counts() == SinkCounts("blocking", written=5, dropped=1, failed=0, threaded=True)


def test_the_pipeline_begins_every_threaded_sinks_close_before_it_waits_for_one():
    """At the end each threaded sink drains what it holds at once: the wait is the slowest
    sink's, not the sum of them. Here the first sink cannot finish until the second has begun
    closing; closed one after the other, the first would wait for the second for ever."""
    from trainvisor.parsers import ParserOptions, create_parser
    from trainvisor.stream.pipeline import Pipeline

    first, second = BlockingSink(), BlockingSink()
    deadline = CloseDeadline(WAIT)
    a = ThreadedSink(first, "first", capacity=10, deadline=deadline)
    b = ThreadedSink(second, "second", capacity=10, deadline=deadline)
    pipeline = Pipeline(create_parser("generic", ParserOptions(year=2026)), sinks=[a, b])
    a.write([1])
    b.write([2])
    assert first.entered.wait(WAIT) and second.entered.wait(WAIT)
    b_closing = threading.Event()
    real_begin = b.begin_close

    def begin_b() -> None:
        real_begin()
        b_closing.set()

    b.begin_close = begin_b
    finisher = threading.Thread(target=pipeline.finish)
    finisher.start()
    try:
        assert b_closing.wait(WAIT)  # the second began closing while the first is still blocked
        assert not first.closed
    finally:  # a failure leaves no thread blocked behind it
        first.release.set()
        second.release.set()
        finisher.join(WAIT)
    assert not finisher.is_alive()
    assert first.closed and second.closed
    assert [a.counts().written, b.counts().written] == [1, 1]


class CostlySink(BlockingSink):
    """Takes 1/64 s of (a fake) CPU a record; its second write blocks until `release`."""

    name = "costly"

    def __init__(self, clock: list) -> None:
        super().__init__()
        self.clock, self.calls = clock, 0

    def write(self, events) -> None:
        self.clock[0] += len(events) / 64
        self.calls += 1
        if self.calls == 1:
            self.batches.append(len(events))
            return
        super().write(events)


def test_a_slow_sinks_queue_holds_at_most_its_backlog_of_writing_at_its_measured_cost(caplog):
    clock = [0.0]
    sink = CostlySink(clock)
    threaded = ThreadedSink(sink, "costly", capacity=100, deadline=CloseDeadline(WAIT), cpu_share=1.0,
                            backlog=5 / 64, cpu_clock=lambda: clock[0])
    threaded.write([1, 2])  # written at once: 1/64 s a record, measured
    threaded.write([3])  # blocks in the sink: the first batch is counted by now
    assert sink.entered.wait(WAIT)
    threaded.write([4, 5, 6])  # an empty queue takes any batch
    threaded.write([7, 8])  # 5 records: 5/64 s of writing, the whole backlog
    assert not threaded.has_room(1)  # a sixth would be more than the backlog, though 95 records would fit
    threaded.write([9])  # dropped, counted
    sink.release.set()
    threaded.close()
    assert sink.batches == [2, 1, 3, 2] and sink.closed
    assert threaded.counts() == SinkCounts("costly", written=8, dropped=1, failed=0, threaded=True)
    assert ("sink costly: its queue holds its share of sinks.backlog (0.078125s of its writing) (it writes slower "
            "than records come)") in caplog.text
