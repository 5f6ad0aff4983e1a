#!/usr/bin/env python3
"""Parse throughput of the Caffe parser against parse_log.py's approach, in one run.

Baseline (in this file): 4 precompiled `re` patterns searched on every line, the
numbers converted -- what Caffe's tools/extra/parse_log.py does per line, minus
its row bookkeeping. Measured side by side on the same dense log (nearly every
line a metric line), best of N runs each; figures are ratios to the baseline.

    python bench/parse_throughput.py [--lines 1000000] [--memory-lines 5000000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from _common import ROOT, best_of, dense_caffe_log

from trainvisor.parsers import ParserOptions, create_parser
from trainvisor.stream.replay import replay

BASELINE_SRC = r'''
import re, sys
def baseline(path):
    r_it = re.compile(r"Iteration (\d+)")
    r_train = re.compile(r"Train net output #(\d+): (\S+) = ([\.\deE+-]+)")
    r_test = re.compile(r"Test net output #(\d+): (\S+) = ([\.\deE+-]+)")
    r_lr = re.compile(r"lr = ([-+]?[0-9]*\.?[0-9]+([eE]?[-+]?[0-9]+)?)")
    rows = 0
    iteration = -1
    with open(path) as f:
        for line in f:
            m = r_it.search(line)
            if m:
                iteration = float(m.group(1))
            m = r_lr.search(line)
            if m:
                lr = float(m.group(1))
            m = r_train.search(line)
            if m:
                v = float(m.group(3)); rows += 1
            m = r_test.search(line)
            if m:
                v = float(m.group(3)); rows += 1
    return rows
if __name__ == "__main__":
    baseline(sys.argv[1])
'''
_ns: dict = {"__name__": "baseline"}
exec(BASELINE_SRC, _ns)  # the same code measured in-process and as its own process
baseline = _ns["baseline"]


def count_lines(path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def run_child(argv) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one child process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} failed with {proc.returncode}")
    return elapsed, usage.ru_maxrss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--memory-lines", type=int, default=5_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    log = dense_caffe_log(a.lines)
    n = count_lines(log)
    print(f"log: {log.name}, {n} lines, {log.stat().st_size / 1e6:.1f} MB")

    t_base = best_of(a.repeat, lambda: baseline(log))
    t_caffe = best_of(a.repeat, lambda: replay(log, create_parser("caffe", ParserOptions(year=2026))))
    print(f"baseline (4 re per line)      {n / t_base / 1e6:6.3f} M lines/s   1.00x")
    print(f"trainvisor caffe parser       {n / t_caffe / 1e6:6.3f} M lines/s   {t_base / t_caffe:.2f}x   (target >= 1.5x)")
    try:
        create_parser("auto")
    except Exception:
        pass
    else:
        t_auto = best_of(a.repeat, lambda: replay(log, create_parser("auto", ParserOptions(year=2026))))
        print(f"trainvisor auto parser        {n / t_auto / 1e6:6.3f} M lines/s   {t_base / t_auto:.2f}x   ({t_auto / t_caffe:.2f}x the caffe parser's time)")

    # End to end, both as fresh processes (interpreter start-up counted for both).
    with tempfile.TemporaryDirectory() as tmp:
        base_script = os.path.join(tmp, "baseline.py")
        with open(base_script, "w") as f:
            f.write(BASELINE_SRC)
        py = sys.executable
        e_base = min(run_child([py, base_script, str(log)])[0] for _ in range(a.repeat))
        e_parse = min(run_child([py, "-m", "trainvisor", "parse", str(log), "--csv", tmp, "--year", "2026"])[0]
                      for _ in range(a.repeat))
        print(f"end to end: baseline process {e_base:.2f} s, `trainvisor parse --csv` {e_parse:.2f} s: "
              f"{e_base / e_parse:.2f}x   (target >= 1.0x)")
        # Memory: flat in the log's length.
        _, rss_small = run_child([py, "-m", "trainvisor", "parse", str(log), "--csv", tmp, "--year", "2026"])
        big = dense_caffe_log(a.memory_lines)
        _, rss_big = run_child([py, "-m", "trainvisor", "parse", str(big), "--csv", tmp, "--year", "2026"])
        print(f"peak memory of `trainvisor parse --csv`: {rss_small / 1024:.0f} MB for {n} lines, "
              f"{rss_big / 1024:.0f} MB for {count_lines(big)} lines   (target < 50 MB, flat)")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
