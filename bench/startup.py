#!/usr/bin/env python3
"""What wrapping a command costs at start: `trainvisor run -q -- /bin/true` against a Python
process that runs /bin/true with subprocess, and the import time of `trainvisor` and of
`trainvisor.Run`. Whole processes, alternated so drift hits both sides alike; medians.

    python bench/startup.py [--rounds 40] [--compare OTHER_CHECKOUT]

`--compare` adds `trainvisor run -q -- /bin/true` from another checkout (e.g. the commit before a
change, its modules byte-compiled like these), interleaved with the rest.

Where trainvisor's share goes: a case that is the floor plus importing, in order, every module the
wrapped run loads beyond the floor's (read from its `-X importtime` report), running nothing; the
wrapped run less that is the run's work, that less the floor the loading of its modules.

Target: trainvisor's own share. The *floor* is a `python -c` that imports click and the standard
modules any process supervisor of this kind needs (FLOOR_MODULES: spawning, threads, signals,
selectors, sockets, logging, JSON, temporary files) and runs /bin/true; click alone pulls in most of
the rest that a run imports (inspect, uuid, gettext, shutil, ...). The wrapped run is at most 1.3x
that floor. The list is fixed, not read from what a run imports, so a standard module trainvisor
adds counts against its share. (The former target, 2x a bare `subprocess.run`, is retired: click and
those modules alone cost more than that, as measured.)
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


FLOOR_MODULES = ("subprocess", "threading", "signal", "selectors", "socket", "fcntl", "queue", "logging",
                 "json", "dataclasses", "typing", "pathlib", "re", "tempfile")
FLOOR = (f"python -c 'import click + {len(FLOOR_MODULES)} std modules'",
         [PY, "-c", f"import click, {', '.join(FLOOR_MODULES)}; subprocess.run(['/bin/true'])"])


def _time(argv: list[str], cwd: str, env: dict[str, str]) -> float:
    """Seconds, or nan when the case fails (an older tree without `trainvisor.Run`)."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0 if done.returncode == 0 else float("nan")


def measure(rounds: int, cases: dict, envs: dict[str, dict[str, str]]) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory(prefix="trainvisor-bench-startup-") as cwd:
        for name, (_, argv) in cases.items():  # warm the page cache and .pyc files
            _time(argv, cwd, envs[name])
        for _ in range(rounds):
            for name, (_, argv) in cases.items():
                times[name].append(_time(argv, cwd, envs[name]))
    return {name: statistics.median(ts) for name, ts in times.items()}


def loaded_modules(argv: list[str], cwd: str, env: dict[str, str]) -> list[str]:
    """The modules a process loads, in import order (its `-X importtime` report)."""
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True)
    return [line.split("|")[2].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2 and "cumulative" not in line]


def imports_case(env: dict[str, str]) -> tuple[str, list[str]]:
    """The floor, plus importing every module a wrapped run loads beyond the floor's, and nothing
    run: the wrapped run's time less this is its work, this less the floor its loading. psutil is
    left out: a run imports it only when its first look at the child's process tree finds the
    child still alive (1 run in 20 of /bin/true here), never at the median."""
    with tempfile.TemporaryDirectory(prefix="trainvisor-bench-startup-") as cwd:
        wrapped = loaded_modules(CASES["wrapped"][1], cwd, env)
        floor = set(loaded_modules(FLOOR[1], cwd, env))
    extra = [m for m in dict.fromkeys(wrapped) if m not in floor and m != "__main__" and m.split(".")[0] != "psutil"]
    # the collector tuned as `main` tunes it once the CLI is loaded, so the loading is timed as a run does it
    code = FLOOR[1][2] + ("\nimport importlib\nfor m in %r:\n    mod = importlib.import_module(m)\n"
                          "    if m == 'trainvisor.cli':\n        mod._tune_gc()" % (extra,))
    return code, extra


def byte_compile(tree: str) -> None:
    """An installed trainvisor is byte-compiled (pip does it); a checkout run with
    PYTHONDONTWRITEBYTECODE set in its environment would compile its ~80 modules at every
    start, some 100 ms the floor's click and standard modules never pay."""
    import compileall

    compileall.compile_dir(os.path.join(tree, "trainvisor"), quiet=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--compare", metavar="OTHER_CHECKOUT", default=None)
    args = ap.parse_args()
    for tree in (str(ROOT), *([args.compare] if args.compare else [])):
        byte_compile(tree)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cases = {**CASES, "floor": FLOOR}
    code, extra = imports_case(env)
    cases["imports"] = (f"the floor + the run's {len(extra)} other modules", [PY, "-c", code])
    envs = {name: env for name in cases}
    if args.compare:
        cases["other"] = (f"the same from {args.compare}", CASES["wrapped"][1])
        envs["other"] = {**os.environ, "PYTHONPATH": os.path.abspath(args.compare)}
    m = measure(args.rounds, cases, envs)
    print(f"startup, medians of {args.rounds} alternating runs")
    for key, (what, _) in cases.items():
        print(f"  {what:<45} {m[key] * 1000:7.1f} ms")
    print(f"  trainvisor run / floor:     {m['wrapped'] / m['floor']:.2f}x (target <= 1.3x)")
    over = m["wrapped"] - m["floor"]
    print(f"  trainvisor's own share: {over * 1000:.1f} ms over the floor (1.3x allows "
          f"{0.3 * m['floor'] * 1000:.1f}): {(m['imports'] - m['floor']) * 1000:.1f} ms loading its modules, "
          f"{(m['wrapped'] - m['imports']) * 1000:.1f} ms running")
    print(f"  trainvisor run / baseline:  {m['wrapped'] / m['baseline']:.2f}x (the retired 2x target)")
    if args.compare:
        print(f"  {args.compare} / floor: {m['other'] / m['floor']:.2f}x")
    print(f"  import trainvisor:          {(m['import'] - m['bare']) * 1000:6.1f} ms over a bare python")
    print(f"  from trainvisor import Run: {(m['run_api'] - m['bare']) * 1000:6.1f} ms over a bare python")


if __name__ == "__main__":
    main()
