#!/usr/bin/env python3
"""What the pytest plugin costs, in one run.

1. A test session that does not use it: `pytest --collect-only` of a 1,000-test dummy suite
   with the plugin installed (a dist-info written from setup.cfg's entry points on the path, as
   `pip install` leaves it) and with `-p no:trainvisor`, rounds interleaved; fastest and median of each, and
   their ratios (target <= 1.05x).
2. `replay_log` of a 1M-line dense Caffe log in-process (events kept): lines per second
   (target >= 1M lines/s), with `trainvisor.replay(..., keep_events=False)` as the baseline.

    python bench/pytest_plugin.py [--tests 1000] [--rounds 9] [--lines 1000000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import configparser
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, best_of, dense_caffe_log

import trainvisor
from trainvisor.testing.replaying import replay_log


def install_site(site: Path) -> None:
    """trainvisor's metadata as pip writes it: the pytest11 entry point makes pytest load the plugin."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    info = site / f"trainvisor-{trainvisor.__version__}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: trainvisor\nVersion: {trainvisor.__version__}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{g}]\n" + "".join(f"{line.strip()}\n" for line in v.strip().splitlines()) + "\n"
        for g, v in cfg["options.entry_points"].items()))


def dummy_suite(where: Path, tests: int) -> None:
    per_file = 100
    for f in range(0, tests, per_file):
        body = "".join(f"def test_{i}():\n    assert {i} == {i}\n\n\n" for i in range(f, min(tests, f + per_file)))
        (where / f"test_dummy_{f // per_file}.py").write_text(body)


def collect(suite: Path, env: dict, *extra: str) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *extra],
                          cwd=suite, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"pytest --collect-only failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return elapsed


def bench_collect(tests: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        site, suite = Path(tmp) / "site", Path(tmp) / "suite"
        suite.mkdir()
        install_site(site)
        dummy_suite(suite, tests)
        env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}", "PYTHONDONTWRITEBYTECODE": "1"}
        header = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider"],
                                cwd=suite, env=env, capture_output=True, text=True).stdout
        loaded = f"trainvisor-{trainvisor.__version__}" in header
        print(f"plugin loaded through the entry point: {loaded}")
        collect(suite, env)  # warm the file cache
        on, off = [], []
        for _ in range(rounds):
            on.append(collect(suite, env))
            off.append(collect(suite, env, "-p", "no:trainvisor"))
        print(f"pytest --collect-only, {tests} tests, {rounds} rounds interleaved (fastest; median):")
        print(f"  with the plugin      {min(on) * 1000:8.1f} ms; {statistics.median(on) * 1000:8.1f} ms")
        print(f"  -p no:trainvisor     {min(off) * 1000:8.1f} ms; {statistics.median(off) * 1000:8.1f} ms")
        print(f"  ratio                {min(on) / min(off):8.3f}x; {statistics.median(on) / statistics.median(off):8.3f}x"
              "  (target <= 1.05x; the fastest round is the least disturbed by a loaded machine)")


def bench_replay(lines: int, repeat: int) -> None:
    log = dense_caffe_log(lines)
    n = sum(1 for _ in open(log, "rb"))
    kept = best_of(repeat, lambda: replay_log(log))
    flat = best_of(repeat, lambda: trainvisor.replay(log, keep_events=False))
    print(f"replay of a {n:,}-line dense Caffe log in-process (best of {repeat}):")
    print(f"  replay_log (events kept)               {n / kept / 1e6:6.2f} M lines/s  (target >= 1.00)")
    print(f"  trainvisor.replay(keep_events=False)   {n / flat / 1e6:6.2f} M lines/s  (time ratio {flat / kept:.2f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tests", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    bench_collect(a.tests, a.rounds)
    bench_replay(a.lines, a.repeat)


if __name__ == "__main__":
    main()
