#!/usr/bin/env python3
"""The per-phase CSV sink alone: microseconds per metric written, its C loop against its Python
loop, on real logs' parsed records (../shared/real-logs), in batches as the pipeline hands them.

    python bench/phase_csv_sink.py [--batch 512] [--repeat 5]

Each figure is the best of `--repeat` CPU-time runs into a fresh folder (write + close).
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from _common import ROOT

import trainvisor
from trainvisor.sinks import phase_csv

LOGS = ("caffe/pyfrcnn-alt-opt-zf.log", "caffe/simplenet-mnist-windows.log", "detectron2/bupt-d2-faster-c4.log",
        "keras/keras3-utf16le-ansi.log", "mmdetection/mmdet2-faster-rcnn-12ep.log")


def _run(metrics: list, batch: int, use_c: bool) -> float:
    d = tempfile.mkdtemp(prefix="phase-csv-bench-")
    try:
        sink = phase_csv.PhaseCsvSink(d)
        write = sink.write if use_c else sink._write
        t0 = time.process_time()
        for i in range(0, len(metrics), batch):
            write(metrics[i:i + batch])
        sink.close()
        return time.process_time() - t0
    finally:
        shutil.rmtree(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if phase_csv._c_write is None:
        raise SystemExit("the C loop is not built (python setup.py build_ext --inplace)")
    logs = ROOT.parent / "shared" / "real-logs"
    for rel in LOGS:
        path = logs / rel
        if not path.exists():
            print(f"{rel}: not available, left out")
            continue
        metrics = list(trainvisor.replay(path, year=2020).metrics)
        written = sum(not m.running for m in metrics)
        py = min(_run(metrics, args.batch, False) for _ in range(args.repeat))
        c = min(_run(metrics, args.batch, True) for _ in range(args.repeat))
        print(f"{rel}: {len(metrics)} metrics ({written} not running): Python {py / len(metrics) * 1e6:.3f} us/metric,"
              f" C {c / len(metrics) * 1e6:.3f} us/metric: {py / c:.1f}x")


if __name__ == "__main__":
    main()
