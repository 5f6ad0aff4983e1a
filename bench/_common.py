"""Helpers shared by the benchmark scripts (not a test; prints figures)."""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fixtures.caffe_log import generate_caffe_log  # noqa: E402

OUT = ROOT / "bench" / "out"


def dense_caffe_log(lines: int) -> Path:
    """A Caffe log of at least `lines` lines where nearly every line carries a
    metric (display: 1, as a run logging every iteration); cached in bench/out."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"dense-caffe-{lines}.log"
    if path.exists() and path.stat().st_size > 0:
        return path
    iters = lines // 3 + 1
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        fh.writelines(generate_caffe_log(max_iter=iters, display=1, test_interval=1000, snapshot=10**9,
                                         seconds_per_iter=0.001))
    os.replace(tmp, path)
    return path


def best_of(n: int, fn) -> float:
    """Fastest of n runs, in seconds (the least disturbed by the machine)."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def median_of(n: int, fn) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
