#!/usr/bin/env python3
"""The sidecar (`trainvisor tail`): write->metric latency and full-speed throughput, in one run.

(a) a writer appends dense Caffe lines to a file at `--rate` lines/s, one write() per line (as
    glog does), stamping each write; `TailRun` follows the file in this process (inotify) with a
    sink that stamps each metric's arrival: latency from a line's write to its metric at the
    sinks, p50/p99 (target p99 < 100 ms). The JSONL file and the position record are written as
    in any sidecar (flushed and recorded after each batch of lines).
(b) a writer writes `--lines-b` dense Caffe lines as fast as it can in 64 KiB writes to a file
    that does not exist yet; `tail -n +1 -F --pid=WRITER FILE | cat > /dev/null` and `trainvisor
    tail FILE --pid WRITER --parser caffe` (parsing, JSONL, the position record) each follow it
    to the writer's end, in alternating rounds: lines/s of each, and their ratio.

    python bench/tail_latency.py [--lines-a 20000] [--rate 2000] [--lines-b 1000000] [--rounds 2]
"""
from __future__ import annotations

import argparse
import array
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from _common import ROOT, dense_caffe_log
from passthrough import ArrivalSink, percentile

from trainvisor import RunConfig
from trainvisor.config import LoggingConfig, ParsingConfig, RunDirConfig
from trainvisor.run.sidecar import TailRun

# Waits for a byte on stdin (so a follower can be started with its pid first), then writes.
WRITER = r'''
import array, os, sys, time
src, dst, mode, rate, stamps_out = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
data = open(src, "rb").read()
sys.stdin.read(1)
fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
if mode == "lines":
    lines = data.splitlines(keepends=True)
    stamps = array.array("d", bytes(8 * len(lines)))
    start, now, write = time.perf_counter(), time.time, os.write
    for i, line in enumerate(lines):
        if i % 100 == 0:
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        stamps[i] = now()
        write(fd, line)
    with open(stamps_out, "wb") as f:
        stamps.tofile(f)
else:
    view = memoryview(data)
    for i in range(0, len(data), 65536):
        os.write(fd, view[i:i + 65536])
os.close(fd)
'''


def writer(src, dst, mode, rate, stamps) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(src), dst, mode, str(rate), stamps],
                            stdin=subprocess.PIPE)


def go(proc: subprocess.Popen) -> None:
    proc.stdin.write(b"g")
    proc.stdin.close()


def latency(a, tmp: str) -> None:
    src = dense_caffe_log(a.lines_a)
    log, stamps_file = os.path.join(tmp, "paced.log"), os.path.join(tmp, "stamps")
    w = writer(src, log, "lines", a.rate, stamps_file)
    sink = ArrivalSink()
    config = RunConfig(parsing=ParsingConfig(parser="caffe", year=2026), logging=LoggingConfig(quiet=True),
                       run=RunDirConfig(dir=os.path.join(tmp, "run-a")))
    run = TailRun(config, log, pid=w.pid, sinks=[sink])
    run.start()
    go(w)  # the follower's pidfd and inotify watch are set up in tail(); the file appears after
    try:
        run.tail()
    finally:
        run.close()
        w.wait()
    stamps = array.array("d")
    with open(stamps_file, "rb") as f:
        stamps.frombytes(f.read())
    lat = [(t - stamps[line - 1]) * 1000 for line, t in zip(sink.lines, sink.times) if 0 < line <= len(stamps)]
    print(f"(a) {len(stamps)} lines at {a.rate:g} lines/s, {len(lat)} metrics: write->metric latency "
          f"p50 {percentile(lat, 0.5):.2f} ms, p99 {percentile(lat, 0.99):.2f} ms, max {max(lat):.2f} ms "
          f"(target p99 < 100 ms)")


def follow_time(src, tmp: str, follower) -> float:
    """Seconds from the writer's go to the follower's exit (it ends when the writer has): a
    follower is ready (has the writer's pid) before the go; the writer is reaped as it ends
    (tail's --pid takes a zombie for a live process)."""
    log = os.path.join(tmp, "fast.log")
    if os.path.exists(log):
        os.unlink(log)
    w = writer(src, log, "fast", 0, "-")
    f, ready = follower(log, w.pid)
    while not ready():
        time.sleep(0.005)
    t0 = time.perf_counter()
    go(w)
    w.wait()
    f.wait()
    return time.perf_counter() - t0


def throughput(a, tmp: str) -> None:
    src = dense_caffe_log(a.lines_b)
    lines = src.read_bytes().count(b"\n")
    tail = shutil.which("tail")

    def tail_cat(log, pid):  # -s: look at the writer's pid every 10 ms (1 s by default)
        proc = subprocess.Popen(f"{tail} -s 0.01 -n +1 -F --pid={pid} {log} 2>/dev/null | cat > /dev/null",
                                shell=True)
        return proc, lambda: True

    def sidecar(log, pid):
        run_dir = os.path.join(tmp, "run-b")
        shutil.rmtree(run_dir, ignore_errors=True)
        proc = subprocess.Popen([sys.executable, "-m", "trainvisor", "tail", log, "--pid", str(pid), "--parser",
                                 "caffe", "--year", "2026", "--run-dir", run_dir, "-q", "--no-summary"])
        # started: its run log says it follows (the start-up is not counted, as tail's is not)
        return proc, lambda: b"following" in _read(os.path.join(run_dir, "train.log"))

    base, ours, floor = [], [], []
    for _ in range(a.rounds):
        base.append(follow_time(src, tmp, tail_cat))
        ours.append(follow_time(src, tmp, sidecar))
        floor.append(replay_time(src, tmp))
    b, o, r = statistics.median(base), statistics.median(ours), statistics.median(floor)
    print(f"(b) {lines} lines ({src.stat().st_size / 1e6:.0f} MB) at full speed, median of {a.rounds}: "
          f"tail -F | cat {lines / b:,.0f} lines/s ({b:.2f} s); trainvisor tail {lines / o:,.0f} lines/s "
          f"({o:.2f} s): {o / b:.2f}x the time of tail -F | cat; {o / r:.2f}x the time of parsing the "
          f"finished file (replay, in process: {lines / r:,.0f} lines/s)")


def replay_time(src, tmp: str) -> float:
    """The parsing floor: the same file replayed through the same parser into a JSONL file."""
    from trainvisor.parsers import ParserOptions, create_parser
    from trainvisor.sinks.jsonl import JsonlSink
    from trainvisor.stream.replay import replay

    sink = JsonlSink(os.path.join(tmp, "replay.jsonl"))
    t0 = time.perf_counter()
    replay(src, create_parser("caffe", ParserOptions(year=2026)), sinks=[sink])
    return time.perf_counter() - t0


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return b""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines-a", type=int, default=20_000)
    p.add_argument("--rate", type=float, default=2000)
    p.add_argument("--lines-b", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="tv-tail-bench-") as tmp:
        latency(a, tmp)
        throughput(a, tmp)


if __name__ == "__main__":
    main()
