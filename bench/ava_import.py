#!/usr/bin/env python3
"""What `from trainvisor.compat.ava import ...` costs: `python -X importtime -c IMPORT` per case,
against a bare `python -c pass`, alternated over several rounds; the median of the summed
cumulative time of the top-level imports, minus the bare interpreter's (its `site` and the like).
Also lists the heavy libraries a case loaded (none should: boto3, qiniu, tensorboard load when used).

    python bench/ava_import.py [--rounds 15]

Target: every case <= 0.2 s (issue 25).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from _common import ROOT

PY = sys.executable
CASES = {
    "cmd, params": "from trainvisor.compat.ava import cmd, params",
    "utils.cmd, params.params": ("from trainvisor.compat.ava.utils import cmd; "
                                 "from trainvisor.compat.ava.params import params"),
    "train.base": "from trainvisor.compat.ava.train.base import TrainInstance",
    "log.logger": "from trainvisor.compat.ava.log.logger import initialize_logger, logger",
    "monitor": "from trainvisor.compat.ava.monitor import caffe, mxnet",
    "utils": ("from trainvisor.compat.ava.utils.uploader import Uploader; "
              "from trainvisor.compat.ava.utils.fetcher import Fetcher"),
}
HEAVY = ("boto3", "botocore", "qiniu", "requests", "tensorboardX", "tensorboard", "mlflow", "watchdog", "mxnet",
         "torch")
TARGET = 0.2


def _importtime(code: str) -> tuple[float, set[str]]:
    """Seconds of the top-level imports' cumulative times, and the heavy packages imported."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": ""}
    done = subprocess.run([PY, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True, check=True)
    total, heavy = 0, set()
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self, cumulative, name = line.split("|", 2)  # "import time: SELF | CUMULATIVE | name"
        name = name[1:]  # the one space after the bar
        if not name.startswith(" "):  # `-X importtime` indents nested imports by two spaces a level
            total += int(cumulative)
        top = name.strip().split(".")[0]
        if top in HEAVY:
            heavy.add(top)
    return total / 1e6, heavy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    cases = {"bare": "pass", **CASES}
    for code in cases.values():  # .pyc files written, page cache warm
        _importtime(code)
    times: dict[str, list[float]] = {name: [] for name in cases}
    heavy: dict[str, set[str]] = {name: set() for name in cases}
    for _ in range(args.rounds):
        for name, code in cases.items():
            t, h = _importtime(code)
            times[name].append(t)
            heavy[name] |= h
    bare = statistics.median(times["bare"])
    print(f"bare python -c pass: {bare * 1000:.1f} ms of imports (median of {args.rounds})")
    worst = 0.0
    for name in CASES:
        cost = statistics.median(times[name]) - bare
        worst = max(worst, cost)
        loaded = ", ".join(sorted(heavy[name])) or "none"
        print(f"{name:<26} {cost * 1000:7.1f} ms over bare  ({cost / TARGET:.2f} of the {TARGET:.1f} s target)"
              f"  heavy libraries loaded: {loaded}")
    print(f"worst case {worst * 1000:.1f} ms: {'within' if worst <= TARGET else 'OVER'} the {TARGET} s target")
    return 0 if worst <= TARGET and not any(heavy[n] for n in CASES) else 1


if __name__ == "__main__":
    sys.exit(main())
