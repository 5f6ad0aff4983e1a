#!/usr/bin/env python3
"""Pass-through cost of `trainvisor run --parser caffe` against `CHILD | cat`, in one run.

(a) the child writes 1M dense Caffe lines at 100k lines/s, one write() per line
    (as glog does): its own run time under trainvisor vs under `| cat`, and the
    delay from each line's write to its metric record reaching a sink (p50/p99).
(b) the child writes 5M lines as fast as it can in 64 KiB writes: lines/s
    through `trainvisor run` (parsing and JSONL on) vs through `cat`, and how many
    of them were parsed: bytes more than the parse backlog (128 MiB a stream) ahead
    of the parser pass through unparsed, so when the parser falls behind, lines/s
    counts lines that were only passed through (the 5M-line log is ~500 MB).
    `--lines-b 1000000` (~100 MB) parses every line.
    With a slow sink (one that sleeps 1 s per write, registered and named with `--sink`, beside
    JSONL): the paced child's run time against `| cat` (target <= 1.05x), and (b)'s lines/s against
    the JSONL-only figure of the same rounds (target >= 0.9x); its drops, from the run log, and
    whether JSONL holds every record. The end-of-run wait for it (sinks.close_timeout, a bound the
    user sets) is 0 here: what is measured is what the slow sink costs parsing.
    Then a ``\r`` storm: the same bytes with ``\r`` instead of ``\n`` (one physical line of
    5M states, as tqdm over a whole epoch writes it), its time against (b)'s (target <= 2x),
    and the splitter + parser CPU of both in process.

    python bench/passthrough.py [--lines-a 1000000] [--rate 100000] [--lines-b 5000000]
                                [--rounds 1] [--compare OTHER_CHECKOUT ...]

`--rounds N` repeats (b), `cat` and each checkout alternating so drift hits all alike, and
prints medians; `--compare` adds (b) from another checkout (e.g. the commit before a change,
its C extensions built in place), run from that checkout with its own `trainvisor`.
"""
from __future__ import annotations

import argparse
import array
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from _common import ROOT, dense_caffe_log

from trainvisor import supervise
from trainvisor.stream.lines import LineSplitter
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


# `trainvisor run` with a sink registered under the name "slow" that sleeps 1 s per write.
SLOW_LAUNCHER = r'''
import sys, time
from trainvisor.sinks.registry import register_sink


class SlowSink:
    name = "slow"

    def write(self, events):
        time.sleep(1.0)

    def flush(self):
        pass

    def close(self):
        pass


register_sink("slow", SlowSink)
from trainvisor.cli import main
main(sys.argv[1:])
'''
SLOW_ARGS = ["--sink", "slow"]
SLOW_ENV = {"TRAINVISOR__SINKS__CLOSE_TIMEOUT": "0"}


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def paced_section(a, py: str, child: str, tmp: str) -> None:
    """(a): a child paced at `a.rate` lines/s, under cat and under an in-process Supervisor."""
    elapsed_file = os.path.join(tmp, "elapsed")
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
        supervise(argv, parser=parser, sinks=[sink], stdout_fd=devnull, stderr_fd=devnull,
                  forward_signals=False)
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
    argv = [py, child, str(log_a), "lines", str(a.rate), "-", elapsed_file]
    run_dir = os.path.join(tmp, "run-slow-a")
    subprocess.run([py, os.path.join(tmp, "slow_launcher.py"), "run", *SLOW_ARGS, "--parser", "caffe", "--year",
                    "2026", "--run-dir", run_dir, "--", *argv], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, env={**os.environ, "PYTHONPATH": str(ROOT), **SLOW_ENV})
    slow_elapsed = float(open(elapsed_file).read())
    print(f"    with a sink sleeping 1 s per write beside JSONL (trainvisor run --sink slow): child run time "
          f"{slow_elapsed:.2f} s: {slow_elapsed / cat_elapsed:.3f}x cat   (target <= 1.05x)")
    print(f"      {slow_sink_counts(run_dir)}")


def parsed_lines(run_dir: str) -> float:
    """Lines the run parsed, from its run log's last words ('ended: exit code 0, N lines, ...')."""
    try:
        text = open(os.path.join(run_dir, "train.log"), encoding="utf-8", errors="replace").read()
    except OSError:
        return float("nan")
    found = re.findall(r"ended: exit code \d+, (\d+) lines", text)
    return float(found[-1]) if found else float("nan")


def run_through(checkout: str, argv: list[str], tmp: str, slow: bool = False) -> tuple[float, float]:
    """(seconds, lines parsed) of `trainvisor run` from `checkout` around `argv`; `slow`: with the
    slow sink (the run directory is kept for `slow_sink_counts`)."""
    run_dir = tempfile.mkdtemp(dir=tmp)
    env = {**os.environ, "PYTHONPATH": checkout, **(SLOW_ENV if slow else {})}
    entry = [os.path.join(tmp, "slow_launcher.py"), "run", *SLOW_ARGS] if slow else ["-m", "trainvisor", "run"]
    t0 = time.perf_counter()
    subprocess.run([argv[0], *entry, "--parser", "caffe", "--year", "2026",
                    "--run-dir", os.path.join(run_dir, "run"), "--", *argv], cwd=checkout, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    seconds = time.perf_counter() - t0
    return seconds, parsed_lines(os.path.join(run_dir, "run"))


def slow_sink_counts(run_dir: str) -> str:
    """What the run log says of its sinks, and whether JSONL holds every record the run parsed."""
    text = open(os.path.join(run_dir, "train.log"), encoding="utf-8", errors="replace").read()
    counts = dict(re.findall(r"sink (\S+): (\d+) records written", text))
    dropped = re.findall(r"sink slow: \d+ records written, (\d+) dropped", text)
    events = re.findall(r"ended: exit code \d+, \d+ lines, (\d+) events", text)
    with open(os.path.join(run_dir, "metrics.jsonl"), "rb") as f:
        records = sum(1 for _ in f)
    return (f"slow sink {counts.get('slow')} written, {dropped[-1] if dropped else '?'} dropped; JSONL "
            f"{records} records of {events[-1] if events else '?'} events "
            f"({'every record' if events and int(events[-1]) == records == int(counts['jsonl']) else 'RECORDS MISSING'})")


def flat_out_section(a, py: str, child: str, tmp: str) -> float:
    """(b): the child as fast as it can, through cat and through each checkout, alternating; returns
    this checkout's median seconds."""
    log_b = dense_caffe_log(a.lines_b)
    n_b = sum(1 for _ in open(log_b, "rb"))
    argv = [py, child, str(log_b), "chunks", "0", "-", os.path.join(tmp, "elapsed")]
    checkouts = [str(ROOT), *(os.path.abspath(c) for c in a.compare)]
    cat_times: list[float] = []
    runs: dict[str, list[tuple[float, float]]] = {c: [] for c in checkouts}
    slow: list[tuple[float, float]] = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        subprocess.run(f"{' '.join(argv)} 2>&1 | cat > /dev/null", shell=True, check=True)
        cat_times.append(time.perf_counter() - t0)
        for checkout in checkouts:
            runs[checkout].append(run_through(checkout, argv, tmp))
        slow.append(run_through(str(ROOT), argv, tmp, slow=True))
    what = f"medians of {a.rounds} alternating rounds" if a.rounds > 1 else "one round"
    print(f"(b) {n_b} lines in 64 KiB writes ({what}): through cat {n_b / statistics.median(cat_times) / 1e3:.0f}k lines/s")
    for checkout in checkouts:
        seconds = statistics.median(t for t, _ in runs[checkout])
        parsed = statistics.median(p for _, p in runs[checkout])
        rates = " ".join(f"{n_b / t / 1e3:.0f}k" for t, _ in runs[checkout])
        print(f"    through trainvisor (parsing + JSONL) from {checkout}: {n_b / seconds / 1e3:.0f}k lines/s, "
              f"{parsed:.0f} lines parsed ({parsed / seconds / 1e3:.0f}k parsed lines/s)   (target >= 700k lines/s)")
        if a.rounds > 1:
            print(f"      each round: {rates}")
    t_slow, t_jsonl = statistics.median(t for t, _ in slow), statistics.median(t for t, _ in runs[str(ROOT)])
    print(f"    with the slow sink beside JSONL: {n_b / t_slow / 1e3:.0f}k lines/s, "
          f"{statistics.median(p for _, p in slow):.0f} lines parsed: {t_jsonl / t_slow:.3f}x the JSONL-only "
          f"figure   (target >= 0.9x)")
    return t_jsonl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines-a", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=100_000)
    ap.add_argument("--lines-b", type=int, default=5_000_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--compare", metavar="OTHER_CHECKOUT", action="append", default=[])
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        child = os.path.join(tmp, "child.py")
        with open(child, "w") as f:
            f.write(CHILD)
        with open(os.path.join(tmp, "slow_launcher.py"), "w") as f:
            f.write(SLOW_LAUNCHER)
        paced_section(a, sys.executable, child, tmp)
        t_b = flat_out_section(a, sys.executable, child, tmp)
        storm_section(a, sys.executable, child, tmp, t_b)


def storm_section(a, py: str, child: str, tmp: str, t_b: float) -> None:
    """(b)'s bytes with every newline a carriage return, through this checkout."""
    log_b = dense_caffe_log(a.lines_b)
    n_b = sum(1 for _ in open(log_b, "rb"))
    t_storm = carriage_return_storm(py, child, log_b, tmp, os.path.join(tmp, "elapsed"))
    print(f"    \\r storm (the same bytes, \\r for \\n): {n_b / t_storm / 1e3:.0f}k states/s, "
          f"{t_storm:.2f} s against {t_b:.2f} s: {t_storm / t_b:.2f}x   (target <= 2x)")
    cpu_lines, cpu_storm = split_and_parse_cpu(dense_caffe_log(a.lines_a))
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
