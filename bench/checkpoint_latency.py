#!/usr/bin/env python3
"""Time from a checkpoint file's close to the watcher handing it to the uploader.

For N Caffe checkpoints (weights + solverstate of SIZE bytes each, written in 1 MiB
writes), the latency is measured from the close of the set's last file to the
consumer's `submit`. The baseline, measured in the same run, is watchdog's own
delivery: a bare inotify handler receiving the same FileClosedEvent; the ratio is
what the watcher (queue, recognition, set assembly, policy) adds on top. The
polling observer (settle 0.5 s) is shown for comparison: its latency is bounded
below by the settle time by design.

    python bench/checkpoint_latency.py [--n 50] [--size 4194304]

`close_to_handover(...)` is importable: the upload bench can pass its own consumer
(e.g. the UploadManager) to measure close -> upload start on top of it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from typing import Optional

from _common import ROOT  # noqa: F401  (puts the repo on sys.path)

from trainvisor.watch import CheckpointWatcher

CHUNK = b"\0" * (1 << 20)


def _write(path: str, size: int) -> float:
    with open(path, "wb") as fh:
        left = size
        while left > 0:
            n = min(left, len(CHUNK))
            fh.write(CHUNK[:n])
            left -= n
    return time.monotonic()


class _Timing:
    def __init__(self, inner=None) -> None:
        self.inner = inner
        self.at: dict[str, float] = {}
        self.cond = threading.Condition()

    def submit(self, cp) -> None:
        t = time.monotonic()
        with self.cond:
            self.at[cp.name] = t
            self.cond.notify_all()
        if self.inner is not None:
            self.inner.submit(cp)

    def wait(self, name: str, timeout: float = 10.0) -> float:
        with self.cond:
            self.cond.wait_for(lambda: name in self.at, timeout)
            return self.at[name]


def close_to_handover(n: int = 50, *, size: int = 4 << 20, poll: bool = False, settle: float = 0.5,
                      consumer=None, directory: Optional[str] = None) -> list[float]:
    """Seconds from the close of each checkpoint's last file to `submit`."""
    with tempfile.TemporaryDirectory(dir=directory) as d:
        timing = _Timing(consumer)
        out = []
        with CheckpointWatcher([d], consumer=timing, poll=poll, settle=settle):
            for i in range(1, n + 1):
                name = f"bench_iter_{i}"
                _write(os.path.join(d, name + ".caffemodel"), size)
                closed = _write(os.path.join(d, name + ".solverstate"), size)
                out.append(timing.wait(name) - closed)
                for ext in (".caffemodel", ".solverstate"):
                    os.unlink(os.path.join(d, name + ext))
        return out


def bare_watchdog(n: int, *, size: int) -> list[float]:
    """Baseline: a plain watchdog inotify handler's delay for the same close."""
    from watchdog.events import FileClosedEvent, FileSystemEventHandler
    from watchdog.observers.inotify import InotifyObserver

    seen: dict[str, float] = {}
    cond = threading.Condition()

    class H(FileSystemEventHandler):
        def on_closed(self, event: FileClosedEvent) -> None:
            with cond:
                seen[os.fsdecode(event.src_path)] = time.monotonic()
                cond.notify_all()

    with tempfile.TemporaryDirectory() as d:
        obs = InotifyObserver()
        obs.schedule(H(), d, recursive=True)
        obs.start()
        out = []
        try:
            for i in range(1, n + 1):
                p = os.path.join(d, f"bench_iter_{i}.solverstate")
                closed = _write(p, size)
                with cond:
                    cond.wait_for(lambda: p in seen, 10)
                out.append(seen[p] - closed)
                os.unlink(p)
        finally:
            obs.stop()
            obs.join()
        return out


def _fmt(xs: list[float]) -> str:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]
    return f"median {statistics.median(xs) * 1000:8.2f} ms   p95 {p95 * 1000:8.2f} ms   max {xs[-1] * 1000:8.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--size", type=int, default=4 << 20)
    a = ap.parse_args()
    base = bare_watchdog(a.n, size=a.size)
    ino = close_to_handover(a.n, size=a.size)
    pol = close_to_handover(min(a.n, 10), size=a.size, poll=True, settle=0.5)
    print(f"close -> hand-over, {a.n} Caffe checkpoints of 2 x {a.size >> 20} MiB")
    print(f"  bare watchdog inotify handler (baseline): {_fmt(base)}")
    print(f"  trainvisor watcher, inotify             : {_fmt(ino)}")
    print(f"  trainvisor watcher, polling, settle 0.5s: {_fmt(pol)}")
    ratio = statistics.median(ino) / max(statistics.median(base), 1e-9)
    print(f"  watcher/baseline median ratio: {ratio:.2f}x;  target median < 500 ms with inotify: "
          f"{'met' if statistics.median(ino) < 0.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
