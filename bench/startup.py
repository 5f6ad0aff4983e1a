#!/usr/bin/env python3
"""What wrapping a command costs at start: `trainvisor run -q -- /bin/true` against a Python
process that runs /bin/true with subprocess, and the import time of `trainvisor` and of
`trainvisor.Run`. Whole processes, alternated so drift hits both sides alike; medians.

    python bench/startup.py [--rounds 40]

Target: the wrapped /bin/true at most 2x the baseline process.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _common import ROOT

PY = sys.executable  # the real interpreter: `python3` on PATH may be a slower wrapper script
CASES = {  # key: (what it is, argv)
    "baseline": ("python -c subprocess.run(['/bin/true'])", [PY, "-c", "import subprocess; subprocess.run(['/bin/true'])"]),
    "wrapped": ("trainvisor run -q -- /bin/true", [PY, "-m", "trainvisor", "run", "-q", "--", "/bin/true"]),
    "bare": ("python -c pass", [PY, "-c", "pass"]),
    "import": ("python -c 'import trainvisor'", [PY, "-c", "import trainvisor"]),
    "run_api": ("python -c 'from trainvisor import Run'", [PY, "-c", "from trainvisor import Run"]),
}


def _time(argv: list[str], cwd: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def measure(rounds: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    times: dict[str, list[float]] = {name: [] for name in CASES}
    with tempfile.TemporaryDirectory(prefix="trainvisor-bench-startup-") as cwd:
        for _, argv in CASES.values():  # warm the page cache and .pyc files
            _time(argv, cwd, env)
        for _ in range(rounds):
            for name, (_, argv) in CASES.items():
                times[name].append(_time(argv, cwd, env))
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    m = measure(args.rounds)
    print(f"startup, medians of {args.rounds} alternating runs")
    for key, (what, _) in CASES.items():
        print(f"  {what:<45} {m[key] * 1000:7.1f} ms")
    print(f"  trainvisor run / baseline:  {m['wrapped'] / m['baseline']:.2f}x (target <= 2x)")
    print(f"  import trainvisor:          {(m['import'] - m['bare']) * 1000:6.1f} ms over a bare python")
    print(f"  from trainvisor import Run: {(m['run_api'] - m['bare']) * 1000:6.1f} ms over a bare python")


if __name__ == "__main__":
    main()
