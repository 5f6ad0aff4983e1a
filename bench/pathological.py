#!/usr/bin/env python3
"""Outputs that once slowed the training or held trainvisor's exit: a progress bar redrawn 240,000
times with `\\r` (24 MB), 50 MB of binary written in 0.1 s, and one 200 MB line. For each, in one
run: the child's own write time under `trainvisor run` against `| cat` (target: within 1.5x, or
0.5 s, whichever is more), and how long trainvisor takes to exit after its child (target: 2 s),
with what share of the output was parsed.

    python bench/pathological.py [--rounds 3] [--only bars|binary|line]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from _common import ROOT

CHILD = r'''
import os, random, sys, time
kind, times_out = sys.argv[1], sys.argv[2]
w = os.write
if kind == "bars":
    data = [b"\r%6d/240000 [=====>    ] loss: %.4f acc: %.4f  " % (i, 1 / (i + 1), i / 240000) + b" " * 40
            for i in range(240000)]
elif kind == "binary":
    blob = random.Random(1).randbytes(50 << 20)
    data = [blob[i:i + 65536] for i in range(0, len(blob), 65536)]
else:
    line = b"x" * (200 << 20)
    data = [line[i:i + 65536] for i in range(0, len(line), 65536)] + [b"\n"]
t0 = time.perf_counter()
for d in data:
    view = memoryview(d)
    while view:
        view = view[w(1, view):]
w(1, b"\n")
t1 = time.perf_counter()
with open(times_out, "w") as fh:
    fh.write(f"{t1 - t0!r} {time.time()!r} {sum(map(len, data)) + 1}")
'''
KINDS = {"bars": "240,000 \\r redraws of a bar (24 MB)", "binary": "50 MB of binary",
         "line": "one 200 MB line"}


def run_once(kind: str, tmp: str, wrapped: bool) -> tuple[float, float, str]:
    """(child's write seconds, seconds from the child's end to the wrapper's exit, parsed note)."""
    child = os.path.join(tmp, "child.py")
    times = os.path.join(tmp, "times")
    argv = [sys.executable, child, kind, times]
    run_dir = tempfile.mkdtemp(dir=tmp)
    if wrapped:
        cmd = [sys.executable, "-m", "trainvisor", "run", "-q", "--run-dir", run_dir, "--", *argv]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    else:
        subprocess.run(f"{' '.join(argv)} | cat > /dev/null", shell=True, check=True)
    ended = time.time()
    write_s, child_end, size = map(float, open(times).read().split())
    return write_s, ended - child_end, parsed_note(run_dir, int(size)) if wrapped else ""


def parsed_note(run_dir: str, size: int) -> str:
    """What the run log says it parsed (lines, events) of the child's output, and the parsed share
    of its bytes from summary.json (what was not parsed: too far behind, after the exit's deadline,
    or binary)."""
    try:
        text = open(os.path.join(run_dir, "train.log"), encoding="utf-8", errors="replace").read()
        summary = json.load(open(os.path.join(run_dir, "summary.json")))
    except (OSError, ValueError):
        return "no run log or summary"
    found = re.findall(r"ended: exit code \d+, (\d+) lines, (\d+) events", text)
    unparsed, binary = summary.get("unparsed_bytes", 0), summary.get("binary_bytes", 0)
    share = f"parsed share {1 - (unparsed + binary) / size:.0%} of {size / 1e6:.0f} MB ({unparsed} bytes not parsed, " \
            f"{binary} binary)"
    return f"{found[-1][0]} lines, {found[-1][1]} events parsed; {share}" if found else share


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=sorted(KINDS))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainvisor-bench-patho-") as tmp:
        with open(os.path.join(tmp, "child.py"), "w") as fh:
            fh.write(CHILD)
        for kind in ([a.only] if a.only else list(KINDS)):
            cat, tv, exits, note = [], [], [], ""
            for _ in range(a.rounds):  # alternating: drift hits both alike
                cat.append(run_once(kind, tmp, False)[0])
                w, e, note = run_once(kind, tmp, True)
                tv.append(w)
                exits.append(e)
            c, t, e = statistics.median(cat), statistics.median(tv), statistics.median(exits)
            bound = max(1.5 * c, 0.5)
            print(f"{KINDS[kind]} (medians of {a.rounds}): child writes in {c:.2f} s into | cat, {t:.2f} s under "
                  f"trainvisor ({t / c:.2f}x; target <= {bound:.2f} s: {'ok' if t <= bound else 'MISSED'}); "
                  f"trainvisor exits {e:.2f} s after it (target <= 2 s: {'ok' if e <= 2 else 'MISSED'}); {note}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
