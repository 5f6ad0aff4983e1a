#!/usr/bin/env python3
"""What every sink on at once costs the training: `trainvisor run --parser caffe` with TensorBoard,
Prometheus (scraped once a second), a webhook to a local receiver, the per-phase CSV tables and
MLflow (a local file store), against `CHILD | cat` and against JSONL alone, in one run.

(a) the child writes `--lines-a` dense Caffe lines at `--rate` lines/s, one write() per line (as
    glog does): its own run time under trainvisor with every sink vs under `| cat`
    (target <= 1.05x).
(b) the child writes `--lines-b` lines as fast as it can in 64 KiB writes: lines/s through
    `trainvisor run` with every sink vs with JSONL only, alternating (target >= 0.8x), two ways:
    the throughput while the training writes (parsed lines per second from the child's start to
    the run's end of parsing, from the run log's timestamps), and over the whole process (parsed
    lines per second of the `trainvisor run` process, its start-up and its close included: a
    fixed cost per run, the sinks writing what they hold, which a 2 s flood makes large). Beside
    them: the child's own flood time on each side, and the least the every-sink run can take with
    its measured CPU (the JSONL-only run's, the sinks' writes, and their set-up: the sink host's
    imports and its libraries', timed alone) spread over every core.
Then each sink's counts (written, dropped, failed) from the run log, and what the receivers got.

    python bench/every_sink.py [--lines-a 1000000] [--rate 100000] [--lines-b 1000000] [--rounds 1]
                               [--sinks tensorboard,prometheus,webhook,csv,mlflow]

A sink that is not installed (or not registered in this checkout) is left out and named.
"""
from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from _common import ROOT, dense_caffe_log

from passthrough import CHILD

WANTED = ("tensorboard", "prometheus", "webhook", "csv", "mlflow")
IMPORTS = {"tensorboard": "tensorboardX", "prometheus": "prometheus_client", "mlflow": "mlflow"}


class Receiver:
    """A local webhook receiver: counts requests and bytes; answers 204."""

    def __init__(self) -> None:
        counts = self.counts = {"requests": 0, "bytes": 0}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                counts["requests"] += 1
                counts["bytes"] += n
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="bench-webhook", daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class Scraper:
    """GET /metrics once a second while a run is on; counts the scrapes that answered."""

    def __init__(self, port: int) -> None:
        self.port, self.ok, self.failed = port, 0, 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="bench-scraper", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                    r.read()
                self.ok += 1
            except OSError:
                self.failed += 1

    def close(self) -> None:
        self._stop.set()
        self.thread.join()


def available() -> tuple[list[str], list[str]]:
    """The sinks of WANTED this checkout can run, and the ones left out (with why)."""
    sys.path.insert(0, str(ROOT))
    from trainvisor.sinks.registry import available_sinks

    names, missing = [], []
    for name in WANTED:
        if name not in available_sinks():
            missing.append(f"{name} (not registered in this checkout)")
            continue
        try:
            __import__(IMPORTS.get(name, "json"))
        except ImportError:
            missing.append(f"{name} (needs {IMPORTS[name]})")
            continue
        names.append(name)
    return names, missing


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_file(tmp: str, names: list[str], receiver: Receiver, port: int) -> str:
    """A YAML config naming every sink with its options, under a fresh directory of `tmp`."""
    out = tempfile.mkdtemp(dir=tmp)
    options = {"tensorboard": f"{{dir: {out}/tb}}", "prometheus": f"{{port: {port}}}",
               "webhook": f"{{url: '{receiver.url}'}}", "csv": f"{{dir: {out}/csv}}",
               "mlflow": f"{{tracking_uri: 'file://{out}/mlruns'}}"}
    path = os.path.join(out, "every.yaml")
    with open(path, "w") as fh:
        fh.write(f"sinks:\n  use: [{', '.join(names)}]\n  options:\n")
        fh.writelines(f"    {n}: {options[n]}\n" for n in names)
    return path


def trainvisor_run(argv: list[str], run_dir: str, config: str | None, port: int | None,
                   cpu: list[float] | None = None) -> float:
    """Seconds of one `trainvisor run` (every sink when `config` is given; Prometheus scraped);
    appends the CPU seconds it and the writing child used to `cpu`."""
    extra = ["--config", config] if config else []
    scraper = Scraper(port) if port else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        # MLflow 3.13+ opens a local file store only when allowed (a tracking server needs nothing)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_ALLOW_FILE_STORE": "true"}
        subprocess.run([sys.executable, "-m", "trainvisor", "run", *extra, "--parser", "caffe", "--year", "2026",
                        "--run-dir", run_dir, "--", *argv], cwd=ROOT, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu is not None:
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        return wall
    finally:
        if scraper is not None:
            scraper.close()
            print(f"      prometheus: {scraper.ok} scrapes answered, {scraper.failed} failed")


def sink_counts(run_dir: str) -> str:
    text = open(os.path.join(run_dir, "train.log"), encoding="utf-8", errors="replace").read()
    found = re.findall(r"sink (\S+): (\d+) records written, (\d+) dropped, (\d+) failed", text)
    return "; ".join(f"{n} {w} written, {d} dropped, {f} failed" for n, w, d, f in found)


def run_summary(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as fh:
        return json.load(fh)


def lines_parsed(run_dir: str) -> int:
    return int(run_summary(run_dir)["lines"])


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def phases(run_dir: str) -> tuple[float, float]:
    """(seconds the run parsed: from the child's start to the run's "ended" line, which comes once
    the engine stopped parsing; seconds from there to the run log's last line: the sinks' close),
    read from the run log's timestamps (milliseconds)."""
    import datetime

    def at(line: str) -> float:
        return datetime.datetime.strptime(_STAMP.match(line).group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()

    lines = [x for x in open(os.path.join(run_dir, "train.log"), encoding="utf-8", errors="replace")
             .read().splitlines() if _STAMP.match(x)]
    start = next(x for x in lines if re.search(r" attempt 1: ", x))
    end = next(x for x in lines if re.search(r" attempt 1 ended: ", x))
    return at(end) - at(start), at(lines[-1]) - at(end)


def sink_cpu(run_dir: str) -> dict[str, float]:
    """Each sink's CPU seconds."""
    return {c["name"]: c.get("cpu_seconds", 0.0) for c in run_summary(run_dir).get("sinks", ())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines-a", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=100_000)
    ap.add_argument("--lines-b", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--sinks", default=",".join(WANTED),
                    help="a comma-separated subset, to tell which sinks cost what (default: every one)")
    a = ap.parse_args()
    names, missing = available()
    chosen = [n for n in a.sinks.split(",") if n]
    unknown = sorted(set(chosen) - set(WANTED))
    if unknown:
        ap.error(f"--sinks: no sink {', '.join(unknown)} here (known: {', '.join(WANTED)})")
    names = [n for n in names if n in chosen]
    print(f"sinks on: {', '.join(names)}" + (f"; left out: {', '.join(missing)}" if missing else ""))
    receiver = Receiver()
    try:
        with tempfile.TemporaryDirectory(prefix="trainvisor-bench-every-") as tmp:
            child = os.path.join(tmp, "child.py")
            with open(child, "w") as fh:
                fh.write(CHILD)
            elapsed = os.path.join(tmp, "elapsed")
            paced(a, child, elapsed, tmp, names, receiver)
            flat_out(a, child, elapsed, tmp, names, receiver)
    finally:
        receiver.close()
    print(f"    webhook receiver: {receiver.counts['requests']} requests, {receiver.counts['bytes']} bytes")


def paced(a, child: str, elapsed: str, tmp: str, names: list[str], receiver: Receiver) -> None:
    log = dense_caffe_log(a.lines_a)
    argv = [sys.executable, child, str(log), "lines", str(a.rate), "-", elapsed]
    subprocess.run(f"{' '.join(argv)} 2>&1 | cat > /dev/null", shell=True, check=True)
    cat_s = float(open(elapsed).read())
    port = free_port()
    run_dir = os.path.join(tmp, "run-a")
    trainvisor_run(argv, run_dir, config_file(tmp, names, receiver, port), port if "prometheus" in names else None)
    tv_s = float(open(elapsed).read())
    print(f"(a) {a.lines_a} lines at {a.rate:.0f} lines/s, one write per line")
    print(f"    child run time: under cat {cat_s:.2f} s, under trainvisor with every sink {tv_s:.2f} s: "
          f"{tv_s / cat_s:.3f}x   (target <= 1.05x)")
    print(f"      {sink_counts(run_dir)}")


def flat_out(a, child: str, elapsed: str, tmp: str, names: list[str], receiver: Receiver) -> None:
    log = dense_caffe_log(a.lines_b)
    n = sum(1 for _ in open(log, "rb"))
    argv = [sys.executable, child, str(log), "chunks", "0", "-", elapsed]
    jsonl, every, cpu_jsonl, cpu_every, extra, parsed_jsonl, parsed_every = [], [], [], [], [], [], []
    window_jsonl, window_every, close_every, flood_jsonl, flood_every = [], [], [], [], []
    for r in range(a.rounds):
        jsonl_dir = os.path.join(tmp, f"run-b-jsonl-{r}")
        jsonl.append(trainvisor_run(argv, jsonl_dir, None, None, cpu_jsonl))
        flood_jsonl.append(float(open(elapsed).read()))
        parsed_jsonl.append(lines_parsed(jsonl_dir))
        window_jsonl.append(phases(jsonl_dir)[0])
        port = free_port()
        run_dir = os.path.join(tmp, f"run-b-every-{r}")
        every.append(trainvisor_run(argv, run_dir, config_file(tmp, names, receiver, port),
                                    port if "prometheus" in names else None, cpu_every))
        flood_every.append(float(open(elapsed).read()))
        parsed_every.append(lines_parsed(run_dir))
        w, c = phases(run_dir)
        window_every.append(w)
        close_every.append(c)
        print(f"      round {r + 1}: {sink_counts(run_dir)}")
        per_sink = sink_cpu(run_dir)
        extra.append(sum(v for k, v in per_sink.items() if k != "jsonl"))
        print("      CPU seconds per sink: " + ", ".join(f"{k} {v:.2f}" for k, v in per_sink.items()))
        print(f"      parsing: JSONL only {parsed_jsonl[-1] / window_jsonl[-1] / 1e3:.0f}k lines/s, every sink "
              f"{parsed_every[-1] / w / 1e3:.0f}k lines/s; the every-sink run's close {c:.2f} s")
    t_jsonl, t_every = statistics.median(jsonl), statistics.median(every)
    # Parsed lines per second: a run that shed its backlog after the child's end (counted, NOT
    # PARSED) is fast by not doing the work; the target is on the lines it read
    p_jsonl = statistics.median(p / t for p, t in zip(parsed_jsonl, jsonl))
    p_every = statistics.median(p / t for p, t in zip(parsed_every, every))
    r_jsonl = statistics.median(p / t for p, t in zip(parsed_jsonl, window_jsonl))
    r_every = statistics.median(p / t for p, t in zip(parsed_every, window_every))
    print(f"(b) {n} lines in 64 KiB writes ({a.rounds} round(s), medians): JSONL only {n / t_jsonl / 1e3:.0f}k lines/s "
          f"({p_jsonl / 1e3:.0f}k parsed lines/s, {statistics.median(parsed_jsonl)} parsed), every sink "
          f"{n / t_every / 1e3:.0f}k lines/s ({p_every / 1e3:.0f}k parsed lines/s, {statistics.median(parsed_every)} "
          f"parsed): {p_every / p_jsonl:.3f}x the JSONL-only figure in parsed lines over the whole process "
          f"(start-up and close included); {t_jsonl / t_every:.3f}x in lines through")
    print(f"    throughput while the training writes (parsed lines per second of parsing, the run's close "
          f"apart): JSONL only {r_jsonl / 1e3:.0f}k, every sink {r_every / 1e3:.0f}k: {r_every / r_jsonl:.3f}x "
          f"(target >= 0.8x); the every-sink run's close {statistics.median(close_every):.2f} s (median)")
    print(f"    the child's flood (its own clock): {statistics.median(flood_jsonl):.2f} s beside JSONL only, "
          f"{statistics.median(flood_every):.2f} s beside every sink (the sinks' set-up and writes share the "
          f"machine with it)")
    # The floor no design can go under: the JSONL-only run's CPU plus what the extra sinks' writes
    # took (measured on their threads, while they kept up or shed) plus their set-up (the imports
    # of the sink host and its libraries, measured alone), spread over every core.
    cores = os.cpu_count() or 1
    c_jsonl, s_extra = statistics.median(cpu_jsonl), statistics.median(extra)
    setup = sink_setup_cpu(names)
    floor = max(t_jsonl, (c_jsonl + s_extra + setup) / cores)
    print(f"    CPU: JSONL-only run {c_jsonl:.2f} s (trainvisor and the child), the extra sinks' writes {s_extra:.2f} s, "
          f"their set-up {setup:.2f} s (every-sink run in all {statistics.median(cpu_every):.2f} s); with that work "
          f"spread perfectly over {cores} cores the every-sink run needs at least {floor:.2f} s: at best "
          f"{t_jsonl / floor:.3f}x in lines through")


SETUP = {  # what each hosted sink imports before its first record (its `prepare`, or its first write)
    "tensorboard": "from trainvisor.sinks.tb_events import _modules; _modules()",
    "mlflow": "import mlflow.entities, mlflow.tracking",
    "webhook": "import trainvisor.sinks.webhook",
    "csv": "import trainvisor.sinks.phase_csv",
}


def sink_setup_cpu(names: list[str], rounds: int = 3) -> float:
    """CPU seconds (median of `rounds`) of a process that imports what the sink host imports for
    `names`: the host's own modules and each hosted sink's library, nothing written."""
    code = "; ".join(["import trainvisor.sinks.host.main"] + [SETUP[n] for n in names if n in SETUP])
    spent = []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(spent)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
