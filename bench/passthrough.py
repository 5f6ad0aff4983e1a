#!/usr/bin/env python3
"""Pass-through cost of `trainvisor run --parser caffe` against `CHILD | cat`, in one run.

(a) the child writes 1M dense Caffe lines at 100k lines/s, one write() per line
    (as glog does): its own run time under trainvisor vs under `| cat`, and the
    delay from each line's write to its metric record reaching a sink (p50/p99).
(b) the child writes 5M lines as fast as it can in 64 KiB writes: lines/s
    through `trainvisor run` (parsing and JSONL on) vs through `cat`; then a
    ``\r`` storm: the same bytes with ``\r`` instead of ``\n`` (one physical line of
    5M states, as tqdm over a whole epoch writes it), its time against (b)'s (target <= 2x).

    python bench/passthrough.py [--lines-a 1000000] [--rate 100000] [--lines-b 5000000]
"""
from __future__ import annotations

import argparse
import array
import os
import subprocess
import sys
import tempfile
import time

from _common import ROOT, dense_caffe_log

from trainvisor import Supervisor
from trainvisor.lines import LineSplitter
from trainvisor.parsers import ParserOptions, create_parser

CHILD = r'''
import array, os, sys, time
path, mode, rate, times_out, elapsed_out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]
data = open(path, "rb").read()
t0 = time.perf_counter()
if mode == "lines":
    lines = data.splitlines(keepends=True)
    stamps = array.array("d", bytes(8 * len(lines)))
    write, now = os.write, time.time
    start = time.perf_counter()
    for i, line in enumerate(lines):
        if i % 1000 == 0:
            target = start + i / rate
            delay = target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        stamps[i] = now()
        write(2, line)
    if times_out != "-":
        with open(times_out, "wb") as f:
            stamps.tofile(f)
else:
    view = memoryview(data)
    for i in range(0, len(data), 65536):
        os.write(2, view[i:i + 65536])
elapsed = time.perf_counter() - t0
open(elapsed_out, "w").write(repr(elapsed))
'''


class ArrivalSink:
    """Records when each metric reaches the sinks (one clock read per batch)."""

    name = "arrival"

    def __init__(self) -> None:
        self.lines = array.array("q")
        self.times = array.array("d")

    def write(self, events) -> None:
        now = time.time()
        for ev in events:
            line = getattr(ev, "line", None)
            if line is not None:
                self.lines.append(line)
                self.times.append(now)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines-a", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=100_000)
    ap.add_argument("--lines-b", type=int, default=5_000_000)
    a = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        child = os.path.join(tmp, "child.py")
        with open(child, "w") as f:
            f.write(CHILD)
        elapsed_file = os.path.join(tmp, "elapsed")

        # (a) paced child
        log_a = dense_caffe_log(a.lines_a)
        argv = [py, child, str(log_a), "lines", str(a.rate), "-", elapsed_file]
        subprocess.run(f"{' '.join(argv)} 2>&1 | cat > /dev/null", shell=True, check=True)
        cat_elapsed = float(open(elapsed_file).read())
        stamps_file = os.path.join(tmp, "stamps")
        argv = [py, child, str(log_a), "lines", str(a.rate), stamps_file, elapsed_file]
        sink = ArrivalSink()
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            parser = create_parser("caffe", ParserOptions(year=2026))
            Supervisor(argv, parser=parser, sinks=[sink], stdout_fd=devnull, stderr_fd=devnull,
                       forward_signals=False).run()
        finally:
            os.close(devnull)
        tv_elapsed = float(open(elapsed_file).read())
        stamps = array.array("d")
        with open(stamps_file, "rb") as f:
            stamps.frombytes(f.read())
        delays = [(t - stamps[line - 1]) * 1000 for line, t in zip(sink.lines, sink.times)]
        print(f"(a) {a.lines_a} lines at {a.rate:.0f} lines/s, one write per line")
        print(f"    child run time: under cat {cat_elapsed:.2f} s, under trainvisor {tv_elapsed:.2f} s: "
              f"{tv_elapsed / cat_elapsed:.3f}x   (target <= 1.05x)")
        print(f"    write -> metric record delay over {len(delays)} metrics: p50 {percentile(delays, 0.5):.1f} ms, "
              f"p99 {percentile(delays, 0.99):.1f} ms, max {max(delays):.1f} ms   (target p99 < 50 ms)")

        # (b) flat out, 64 KiB writes
        log_b = dense_caffe_log(a.lines_b)
        n_b = sum(1 for _ in open(log_b, "rb"))
        argv = [py, child, str(log_b), "chunks", "0", "-", elapsed_file]
        t0 = time.perf_counter()
        subprocess.run(f"{' '.join(argv)} 2>&1 | cat > /dev/null", shell=True, check=True)
        t_cat = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run([py, "-m", "trainvisor", "run", "--parser", "caffe", "--year", "2026",
                        "--run-dir", os.path.join(tmp, "run"), "--", *argv],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        t_tv = time.perf_counter() - t0
        print(f"(b) {n_b} lines in 64 KiB writes: through cat {n_b / t_cat / 1e3:.0f}k lines/s, "
              f"through trainvisor (parsing + JSONL) {n_b / t_tv / 1e3:.0f}k lines/s   (target >= 700k lines/s)")
        t_storm = carriage_return_storm(py, child, log_b, tmp, elapsed_file)
        print(f"    \\r storm (the same bytes, \\r for \\n): {n_b / t_storm / 1e3:.0f}k states/s, "
              f"{t_storm:.2f} s against {t_tv:.2f} s: {t_storm / t_tv:.2f}x   (target <= 2x)")
        cpu_lines, cpu_storm = split_and_parse_cpu(log_a)
        print(f"    split + parse in process, CPU (best of 3, {a.lines_a} lines): lines {cpu_lines:.2f} s, "
              f"\\r storm {cpu_storm:.2f} s: {cpu_storm / cpu_lines:.2f}x   (target <= 2x)")


def split_and_parse_cpu(log_path) -> tuple[float, float]:
    """CPU seconds of the splitter and the Caffe parser alone (no process, no sink), for the log
    and for it with \\r for \\n: the pipeline's own cost, apart from pipes and JSONL."""
    data = open(log_path, "rb").read()

    def run(d: bytes) -> float:
        splitter, parser = LineSplitter("stdout"), create_parser("caffe", ParserOptions(year=2026))
        t0 = time.process_time()
        for i in range(0, len(d), 65536):
            block = splitter.feed(d[i:i + 65536], 0.0, 0.0)
            if block is not None:
                parser.feed(block)
        block = splitter.finish(0.0, 0.0)
        if block is not None:
            parser.feed(block)
        return time.process_time() - t0

    storm = data.replace(b"\n", b"\r")
    return min(run(data) for _ in range(3)), min(run(storm) for _ in range(3))


def carriage_return_storm(py: str, child: str, log_path, tmp: str, elapsed_file: str) -> float:
    """Seconds `trainvisor run --parser caffe` takes for the log with every newline a carriage return."""
    storm = os.path.join(tmp, "storm.log")
    with open(log_path, "rb") as src, open(storm, "wb") as dst:
        dst.write(src.read().replace(b"\n", b"\r"))
    argv = [py, child, storm, "chunks", "0", "-", elapsed_file]
    t0 = time.perf_counter()
    subprocess.run([py, "-m", "trainvisor", "run", "--parser", "caffe", "--year", "2026",
                    "--run-dir", os.path.join(tmp, "run-storm"), "--", *argv],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
