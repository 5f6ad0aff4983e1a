"""The pass-through never waits for parsing (supervisor/readers.py, trainvisor/_native/_pump.c):
the C pump writes the child's bytes through while the parsing holds the interpreter lock; its
full ring drops the oldest chunks, counted, with their newlines; after the child's end the
channel parses for a bounded time only; a cut line's tail is never queued; the C line gate
behaves as the Python one."""
from __future__ import annotations

import ctypes
import json
import os
import queue
import select
import subprocess
import sys
import threading

import pytest

from trainvisor import Supervisor, supervise
from trainvisor.parsers import ParserOptions, create_parser
from trainvisor.run.live import drive_child
from trainvisor.stderr_gate import LineGate, native_pump
from trainvisor.stream.lines import LineSplitter
from trainvisor.stream.pipeline import Pipeline
from trainvisor.stream.source import ByteBudget, Channel, Chunk, End, Eof, Gap
from trainvisor.supervisor.readers import PipeReader

from .conftest import FIXTURES

PUMP = native_pump()
needs_pump = pytest.mark.skipif(PUMP is None, reason="C pump not built (no compiler at install), or TRAINVISOR_PURE_PYTHON")
PY = sys.executable


class _PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


# poll(2) called through PyDLL: the interpreter lock stays held for the whole wait, as it does
# while the generic parser reads a progress-bar storm in C.
_poll_holding_the_lock = ctypes.PyDLL(None).poll
_poll_holding_the_lock.argtypes = [ctypes.POINTER(_PollFd), ctypes.c_ulong, ctypes.c_int]


def _take_all(pump) -> list[tuple]:
    items = []
    while (got := pump.take(10.0)) is not None:
        items += got
    return items


@needs_pump
def test_the_child_finishes_writing_while_the_parsing_holds_the_interpreter_lock(tmp_path):
    """A hook that holds the lock until the child says it wrote 4 MiB (64 times a pipe's buffer):
    only a pass-through that needs no lock lets the child get there; all of it arrives, exactly."""
    fifo = tmp_path / "done"
    os.mkfifo(fifo)
    done_r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # open before the child writes to it
    code = ("import os, sys\nd = (b'x' * 1023 + b'\\n') * 1024\nfor _ in range(4): os.write(1, d)\n"
            "os.write(os.open(sys.argv[1], os.O_WRONLY), b'x')\n")
    answers = []

    def hold_lock(record) -> None:
        if not answers:
            fd = _PollFd(done_r, select.POLLIN, 0)
            answers.append(_poll_holding_the_lock(ctypes.byref(fd), 1, 20_000))  # 1: the child wrote it all

    out = tmp_path / "out"
    with open(out, "wb") as fh:
        try:
            result = supervise([PY, "-c", code, str(fifo)], parser="caffe", hooks=[hold_lock],
                               stdout_fd=fh.fileno(), stderr_fd=None, forward_signals=False)
        finally:
            os.close(done_r)
    assert result.exit_code == 0
    assert answers == [1]
    assert out.read_bytes() == (b"x" * 1023 + b"\n") * 4096


@needs_pump
def test_a_full_ring_drops_its_oldest_chunks_as_one_counted_gap_with_their_newlines(tmp_path):
    r, w = os.pipe()
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        pump = PUMP.Pump(r, out_fd=fh.fileno(), capacity=64 * 1024)
        pump.start()
        lines = [b"step %06d loss %.4f\n" % (i, 1 / (i + 1)) for i in range(20000)]  # 500 KB, 8x the ring
        data = b"".join(lines)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(w, view[:65536]):]
            os.close(w)
            items = _take_all(pump)  # taken only now: the ring has overflowed many times
        finally:
            pump.join()
            os.close(r)
    at = 0  # each gap stands for the bytes it passed over, with their newlines; each chunk is the next bytes
    for item in items:
        if type(item[0]) is int:
            size, newlines, ends_with_newline = item
            assert 0 < data.count(b"\n", at, at + size) == newlines
            assert ends_with_newline == (data[at + size - 1:at + size] == b"\n")
            at += size
        else:
            assert item[0] == data[at:at + len(item[0])]
            at += len(item[0])
    assert at == len(data)
    assert type(items[0][0]) is int and pump.dropped == sum(i[0] for i in items if type(i[0]) is int)
    assert pump.dropped < len(data)  # what the ring held at the end was kept
    assert out.read_bytes() == data  # the pass-through lost nothing
    assert pump.errors == (0, 0)


@needs_pump
def test_the_pumps_run_log_interleaves_the_streams_by_whole_lines(tmp_path):
    log_path = tmp_path / "run.log"
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT)
    run_log = PUMP.RunLog(fd)
    pipes = [os.pipe(), os.pipe()]
    pumps = [PUMP.Pump(r, run_log=run_log) for r, _ in pipes]
    for p in pumps:
        p.start()
    try:
        os.write(pipes[0][1], b"epoch 1 lo")
        os.write(pipes[1][1], b"warning: slow\n")
        os.close(pipes[1][1])
        assert pumps[1].take(10.0) is None  # capacity 0: nothing queued, only the end
        pumps[1].join()
        os.write(pipes[0][1], b"ss 0.5\r50%\r100%\nlast")
        os.close(pipes[0][1])
        assert pumps[0].take(10.0) is None
        pumps[0].join()
    finally:
        os.close(fd)
        for r, _ in pipes:
            os.close(r)
    # stderr's line is in first, whole; stdout's waited for its end; its last part line at its end
    assert log_path.read_bytes() == b"warning: slow\nepoch 1 loss 0.5\r50%\r100%\nlast"


@pytest.mark.parametrize("gate_class", [LineGate, *((PUMP.LineGate,) if PUMP else ())],
                         ids=lambda c: c.__module__.rpartition(".")[2])
def test_both_gates_hold_a_message_until_the_line_ends_or_the_wait_is_over(gate_class):
    r, w = os.pipe()
    try:
        gate = gate_class(w, wait=30)
        gate.pass_through(w, b"step 1 loss: 0.5\nstep 2 lo")
        speaker = threading.Thread(target=gate.say, args=("trainvisor: upload failed",))
        speaker.start()
        while gate.waiting != 1 and speaker.is_alive():  # the message waits for the line's end
            os.sched_yield()
        gate.pass_through(w, b"ss: 0.4\nstep 3")
        speaker.join()
        short = gate_class(w, wait=0.01)  # a line left open past the wait: the message on its own line
        short.pass_through(w, b"bar 10%")
        short.say("trainvisor: retrying")
        os.close(w)
        w = -1
        got = b""
        while chunk := os.read(r, 65536):
            got += chunk
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert got == (b"step 1 loss: 0.5\nstep 2 loss: 0.4\ntrainvisor: upload failed\nstep 3"
                   b"bar 10%\ntrainvisor: retrying\n")


def test_after_the_deadline_queued_chunks_are_passed_over_and_counted():
    now = [100.0]
    channel = Channel(1 << 20, clock=lambda: now[0], tail_bytes=0)
    for data in (b"loss 1\nloss", b" 2\n", b"loss 3\nloss 4\n"):
        channel.put(Chunk("stdout", data, 0.0, 0.0))
    channel.put(End())
    channel.parse_until(100.5)
    items = channel.items(0.1)
    assert next(items) == Chunk("stdout", b"loss 1\nloss", 0.0, 0.0)
    now[0] = 100.6
    assert list(items) == [Gap("stdout", 3, 1, True), Gap("stdout", 14, 2, True), End()]
    assert channel.shed_bytes == 17
    assert channel.budgets["stdout"].in_flight() == -len(b"loss 1\nloss 2\nloss 3\nloss 4\n")  # taken, all of it


def test_after_the_deadline_each_streams_last_lines_are_still_parsed():
    # the backlog's head is shed; each stream's last `tail_bytes`, from a line's start, are read:
    # a training's final scores are its last lines
    now = [100.0]
    channel = Channel(1 << 20, clock=lambda: now[0], tail_bytes=8)
    for stream, data in (("stdout", b"loss 1\nloss"), ("stdout", b" 2\n"), ("stderr", b"warn\n"),
                         ("stdout", b"loss 3\nloss 4\n")):
        channel.put(Chunk(stream, data, 0.0, 0.0))
    channel.put(End())
    channel.parse_until(100.5)
    now[0] = 100.6
    assert list(channel.items(0.1)) == [
        Gap("stdout", 11, 1, False), Gap("stdout", 3, 1, True), Chunk("stderr", b"warn\n", 0.0, 0.0),
        Gap("stdout", 7, 1, True), Chunk("stdout", b"loss 4\n", 0.0, 0.0), End()]
    assert channel.shed_bytes == 21
    assert (channel.budgets["stdout"].in_flight(), channel.budgets["stderr"].in_flight()) == (-28, -5)  # all taken


def test_a_gap_inside_a_line_cut_already_keeps_the_lines_head_and_its_number():
    splitter = LineSplitter("stdout", max_line=1024)
    assert splitter.feed(b"x" * 3000, 0.0, 0.0) is None
    splitter.skip(0, False)  # the source passed over the tail: nothing the splitter would read
    block = splitter.feed(b"yyy\nloss = 0.25\n", 0.0, 0.0)
    assert [(r.number, len(r.text), r.truncated) for r in block.records()] == [(1, 1024, True), (2, 11, False)]


def _run_cli(tmp_path, name: str, pure: bool, argv: list[str]) -> tuple[bytes, bytes, bytes, bytes]:
    """(stdout, stderr, run log, metrics.jsonl) of `trainvisor run` around `argv`, with the C pump or
    the pure-Python readers."""
    env = {k: v for k, v in os.environ.items() if k != "TRAINVISOR_PURE_PYTHON"}
    if pure:
        env["TRAINVISOR_PURE_PYTHON"] = "1"
    run_dir, log_file = tmp_path / name, tmp_path / f"{name}.log"
    proc = subprocess.run([PY, "-m", "trainvisor", "run", "-q", "--run-dir", str(run_dir), "--log-file",
                           str(log_file), "--", *argv], capture_output=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr, log_file.read_bytes(), (run_dir / "metrics.jsonl").read_bytes()


def _without_time(record: bytes) -> dict:
    return {k: v for k, v in json.loads(record).items() if k != "wall_time"}  # when the run read it


def test_the_c_pump_and_the_python_readers_pass_log_and_parse_the_same(tmp_path):
    """A real Caffe log (glog on stderr) with a progress bar redrawn on stdout between its lines."""
    lines = (FIXTURES / "logs" / "lenet-newyear.log").read_bytes().splitlines(keepends=True)
    bar = b"".join(b"\r%3d%% [%-20s]" % (i, b"=" * (i // 5)) for i in range(0, 101, 5)) + b"\n"
    script = tmp_path / "child.py"
    script.write_text("import os, sys\nlines = open(sys.argv[1], 'rb').read().splitlines(keepends=True)\n"
                      "for i, line in enumerate(lines):\n    os.write(2, line)\n"
                      f"    if i % 50 == 0: os.write(1, {bar!r})\n")
    argv = [PY, str(script), str(FIXTURES / "logs" / "lenet-newyear.log")]
    pure = _run_cli(tmp_path, "pure", True, argv)
    native = _run_cli(tmp_path, "native", False, argv) if PUMP is not None else pure
    assert pure[0] == bar * len(range(0, len(lines), 50)) and pure[1] == b"".join(lines)
    assert native[:2] == pure[:2]  # stdout and stderr, byte for byte
    # the run log: the same whole lines (how the two streams interleave is the threads' race)
    assert sorted(native[2].splitlines(keepends=True)) == sorted(pure[2].splitlines(keepends=True))
    metrics = [_without_time(r) for r in native[3].splitlines()]
    assert metrics == [_without_time(r) for r in pure[3].splitlines()]
    assert sum(m.get("name") == "loss" for m in metrics) > 0


def test_the_tail_of_a_line_past_twice_max_line_is_handed_on_as_an_uncounted_gap():
    r, w = os.pipe()
    got: "queue.SimpleQueue" = queue.SimpleQueue()
    budget = ByteBudget(1 << 30)
    budget.line_cap = 100
    reader = PipeReader("stdout", r, passthrough_fd=None, put=got.put, budget=budget)
    reader.start()
    try:
        os.write(w, b"x" * 150)
        assert got.get(timeout=10).data == b"x" * 150  # not past 200 yet: read, and cut by the splitter
        os.write(w, b"x" * 60)
        assert got.get(timeout=10).data == b"x" * 60  # the line's segment passes 200 here
        os.write(w, b"x" * 500)
        assert got.get(timeout=10) == Gap("stdout", 500, 0, False)  # wholly in the tail: not queued
        os.write(w, b"yy\nloss 1\n")
        assert got.get(timeout=10).data == b"yy\nloss 1\n"  # the line's end, and the next line
    finally:
        os.close(w)
        reader.join()
        os.close(r)
    assert got.get(timeout=10) == Eof("stdout")
    assert reader.dropped_bytes == 0 and budget.in_flight() == 150 + 60 + 10


class _StoppedAfterTheDeadline:
    """A side source of drive_child: it is stopped right after the channel's deadline is set."""

    def __init__(self) -> None:
        self.stopped = threading.Event()

    def start(self, put) -> None:
        pass

    def stop(self) -> None:
        self.stopped.set()


@pytest.mark.parametrize("tail", [0, 4096])
def test_what_is_queued_past_the_deadline_after_the_childs_end_is_counted_not_parsed(tmp_path, tail):
    """The hook holds the first line until the child has ended and the deadline (0 s) is set: what
    the child wrote after the first chunk is passed through, counted, and never parsed, but for
    the last `tail` bytes (from a line's start), which are."""
    data = b"".join(b"step %d loss=%.3f\n" % (i, 1 / (i + 1)) for i in range(20000))  # ~400 KB
    side = _StoppedAfterTheDeadline()
    seen = []

    def hold_first(record) -> None:
        if not seen:
            assert side.stopped.wait(30)
        seen.append(record.number)

    code = "import os, sys\nd = open(sys.argv[1], 'rb').read()\nwhile d: d = d[os.write(1, d):]\n"
    (tmp_path / "log").write_bytes(data)
    out = tmp_path / "out"
    with open(out, "wb") as fh:
        supervisor = Supervisor([PY, "-c", code, str(tmp_path / "log")], channel=Channel(1 << 30, tail_bytes=tail),
                                stdout_fd=fh.fileno(), stderr_fd=None, forward_signals=False)
        pipeline = Pipeline(create_parser("generic", ParserOptions(year=2026)), hooks=[hold_first])
        result = drive_child(supervisor, pipeline, side=[side], parse_after_exit=0.0)
        pipeline.finish()
    assert out.read_bytes() == data
    tail_start = data.find(b"\n", len(data) - tail - 1) + 1 if tail else len(data)
    first_chunk = tail_start - result.unparsed_bytes  # the one chunk taken before the deadline
    assert 0 < first_chunk < tail_start
    lines = data.count(b"\n")
    head = list(range(1, data.count(b"\n", 0, first_chunk) + 1))  # its whole lines
    assert seen == head + list(range(data.count(b"\n", 0, tail_start) + 1, lines + 1))  # and the tail's
