"""Throughput of 4 processes logging to one file, measured in one run through:

1. trainvisor.logging.MultiProcessingLogHandler (one writer thread, framed Unix socket, acks),
   each process building its own handler on the file (one of them becomes the writer, the
   others send to it: concurrent-log-handler's set-up), and, for comparison, one handler
   created by the parent and inherited by the forked workers;
2. the standard library's QueueHandler -> multiprocessing.Queue -> QueueListener -> FileHandler;
3. a per-write file-lock handler, as concurrent-log-handler works: every record takes an
   exclusive flock on a lock file, checks the file for rotation, writes and flushes; measured
   both reopening the file per record (its long-standing default) and keeping it open.

Prints records/s for each and the ratios. Every variant's output is counted, so a handler
that loses records cannot look fast.

    .venv/bin/python bench/log_handler.py [--records N] [--processes P]
"""
from __future__ import annotations

import argparse
import fcntl
import logging
import logging.handlers
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainvisor.logging import MultiProcessingLogHandler  # noqa: E402

FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
CTX = multiprocessing.get_context("fork")


class FlockPerWriteHandler(logging.Handler):
    """The baseline: correctness by an exclusive file lock around every single write."""

    def __init__(self, filename: str, *, max_bytes: int, keep_open: bool) -> None:
        super().__init__()
        self.filename = filename
        self.lock_path = filename + ".lock"
        self.max_bytes = max_bytes
        self.keep_open = keep_open
        self._pid = -1
        self._lock_fd = -1
        self._stream = None

    def emit(self, record: logging.LogRecord) -> None:
        msg = self.format(record) + "\n"
        if self._pid != os.getpid():  # flock is per open file description: reopen after fork
            self._pid = os.getpid()
            self._lock_fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            self._stream = None
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            if self._stream is not None and os.stat(self.filename).st_ino != os.fstat(self._stream.fileno()).st_ino:
                self._stream.close()  # another process rotated the file
                self._stream = None
            if self._stream is None:
                self._stream = open(self.filename, "a", encoding="utf-8")
            if self._stream.tell() + len(msg) > self.max_bytes:
                self._stream.close()
                _rotate(self.filename)
                self._stream = open(self.filename, "a", encoding="utf-8")
            self._stream.write(msg)
            self._stream.flush()
            if not self.keep_open:
                self._stream.close()
                self._stream = None
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)


def _rotate(filename: str) -> None:
    n = 1
    while os.path.exists(f"{filename}.{n}"):
        n += 1
    for i in range(n - 1, 0, -1):
        os.replace(f"{filename}.{i}", f"{filename}.{i + 1}")
    os.replace(filename, filename + ".1")


def _worker(start, make_handler: Callable[[], logging.Handler], records: int, index: int) -> None:
    log = logging.getLogger(f"bench.worker{index}")
    log.propagate = False
    log.setLevel(logging.INFO)
    handler = make_handler()
    log.addHandler(handler)
    start.wait()
    for i in range(records):
        log.info("step %d loss=%.4f lr=%g worker %d", i, 1.0 / (i + 1), 0.01, index)


def _run(make_handler: Callable[[], logging.Handler], processes: int, records: int,
         finish: Callable[[], None]) -> float:
    start = CTX.Event()
    procs = [CTX.Process(target=_worker, args=(start, make_handler, records, i)) for i in range(processes)]
    for p in procs:
        p.start()
    time.sleep(0.2)  # all workers set up and waiting
    t0 = time.perf_counter()
    start.set()
    for p in procs:
        p.join()
    finish()  # until every record is in the file
    elapsed = time.perf_counter() - t0
    assert all(p.exitcode == 0 for p in procs)
    return elapsed


def _count_lines(path: Path) -> int:
    total = 0
    for p in path.parent.glob(path.name + "*"):
        if not p.name.endswith(".lock"):
            with open(p, "rb") as f:
                total += sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    return total


class FormatOnlyHandler(logging.Handler):
    """No output at all: the logging module's own per-record cost, the ceiling for any handler."""

    def emit(self, record: logging.LogRecord) -> None:
        self.format(record)


def bench_ceiling(processes: int, records: int) -> float:
    def make() -> logging.Handler:
        h = FormatOnlyHandler()
        h.setFormatter(logging.Formatter(FORMAT))
        return h

    return _run(make, processes, records, lambda: None)


def _trainvisor_handler(path: Path, max_bytes: int) -> MultiProcessingLogHandler:
    handler = MultiProcessingLogHandler(path, maxBytes=max_bytes, backupCount=1000, export_env=False)
    handler.setFormatter(logging.Formatter(FORMAT))
    return handler


def bench_trainvisor(path: Path, processes: int, records: int, max_bytes: int) -> float:
    """Every worker builds its own handler; each closes it at exit (multiprocessing's exit
    hook), so once all are joined every record is in the file."""
    return _run(lambda: _trainvisor_handler(path, max_bytes), processes, records, lambda: None)


def bench_trainvisor_inherited(path: Path, processes: int, records: int, max_bytes: int) -> float:
    handler = _trainvisor_handler(path, max_bytes)
    return _run(lambda: handler, processes, records, handler.close)


def bench_queue_listener(path: Path, processes: int, records: int, max_bytes: int) -> float:
    queue = CTX.Queue(-1)
    target = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=1000)
    target.setFormatter(logging.Formatter(FORMAT))
    listener = logging.handlers.QueueListener(queue, target)
    listener.start()

    def finish() -> None:
        listener.stop()
        target.close()

    return _run(lambda: logging.handlers.QueueHandler(queue), processes, records, finish)


def bench_flock(path: Path, processes: int, records: int, max_bytes: int, *, keep_open: bool) -> float:
    def make() -> logging.Handler:
        h = FlockPerWriteHandler(str(path), max_bytes=max_bytes, keep_open=keep_open)
        h.setFormatter(logging.Formatter(FORMAT))
        return h

    return _run(make, processes, records, lambda: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000, help="records per process")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--max-bytes", type=int, default=8 * 1024 * 1024, help="rotation size")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; medians are reported")
    args = parser.parse_args()
    total = args.records * args.processes
    variants = {
        "trainvisor MultiProcessingLogHandler": lambda p: bench_trainvisor(p, args.processes, args.records, args.max_bytes),
        "trainvisor, one handler from the parent": lambda p: bench_trainvisor_inherited(
            p, args.processes, args.records, args.max_bytes),
        "stdlib QueueHandler/QueueListener": lambda p: bench_queue_listener(p, args.processes, args.records, args.max_bytes),
        "flock per write, file kept open": lambda p: bench_flock(p, args.processes, args.records, args.max_bytes, keep_open=True),
        "flock per write, reopen per write": lambda p: bench_flock(p, args.processes, args.records // 5, args.max_bytes, keep_open=False),
    }
    variants["(ceiling: format only, no output)"] = lambda p: bench_ceiling(args.processes, args.records)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    print(f"{args.processes} processes, {args.records} records each, fork, rotation at {args.max_bytes} bytes,"
          f" {os.cpu_count()} cores; median of {args.repeat} interleaved rounds")
    with tempfile.TemporaryDirectory(prefix="tvbench-") as tmp:
        for round_ in range(args.repeat):
            for i, (name, run) in enumerate(variants.items()):
                path = Path(tmp) / f"r{round_}v{i}" / "bench.log"
                path.parent.mkdir()
                elapsed = run(path)
                expected = 0 if "ceiling" in name else total // 5 if "reopen" in name else total
                n = _count_lines(path)
                assert n == expected, f"{name}: {n} records in the file, expected {expected}"
                samples[name].append((expected or total) / elapsed)
                shutil.rmtree(path.parent)
    rates = {name: statistics.median(values) for name, values in samples.items()}
    ceiling = rates.pop("(ceiling: format only, no output)")
    print(f"  {'(ceiling: format only, no output)':38s} {ceiling:>9.0f} records/s")
    for name, rate in rates.items():
        rounds = " ".join(f"{v:.0f}" for v in samples[name])
        print(f"  {name:38s} {rate:>9.0f} records/s   (rounds: {rounds})")
    ours = rates["trainvisor MultiProcessingLogHandler"]
    print(f"trainvisor reaches {ours / ceiling:.0%} of the format-only ceiling;"
          f" no handler can beat the ceiling, which is {ceiling / rates['flock per write, file kept open']:.1f}x"
          " the kept-open flock baseline")
    print("ratios (trainvisor / other):")
    for name, rate in rates.items():
        if name != "trainvisor MultiProcessingLogHandler":
            print(f"  vs {name:35s} {ours / rate:6.2f}x")


if __name__ == "__main__":
    main()
