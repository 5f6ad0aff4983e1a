#!/usr/bin/env python3
"""The checksums an S3 upload or download may be verified with, on one buffer in memory: MB/s and
CPU seconds of each, and each one's CPU against CRC32C's (the `crc32c` module: what uploads ask
for). CRC64NVME is trainvisor's C module (uploaders/crc64nvme.py; `--pure` adds its pure-Python
fallback, on 4 MiB: it is that slow). Best of `--rounds` (the least disturbed by a loaded machine).

    python bench/checksums.py [--size-mib 256] [--rounds 5] [--pure]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import time
import zlib

from _common import ROOT  # noqa: F401  (puts the repo on sys.path)

MIB = 1 << 20


def _measure(fn, data: bytes, rounds: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds of this thread) of fn(data)."""
    walls, cpus = [], []
    for _ in range(rounds):
        w, c = time.perf_counter(), time.thread_time()
        fn(data)
        walls.append(time.perf_counter() - w)
        cpus.append(time.thread_time() - c)
    return min(walls), min(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pure", action="store_true", help="also the pure-Python CRC64NVME (on 4 MiB)")
    args = ap.parse_args()
    from crc32c import crc32c

    from trainvisor.uploaders import crc64nvme as crc64

    if not crc64.NATIVE:
        raise SystemExit("the C module trainvisor._native._crc64 is not built: python setup.py build_ext --inplace")
    data = os.urandom(args.size_mib * MIB)
    kinds = [("crc32c (crc32c module)", lambda d: crc32c(d)), ("crc64nvme (C)", lambda d: crc64.crc64nvme(d)),
             ("crc32 (zlib)", lambda d: zlib.crc32(d)), ("md5 (hashlib)", lambda d: hashlib.md5(d).digest()),
             ("sha256 (hashlib)", lambda d: hashlib.sha256(d).digest())]
    print(f"{args.size_mib} MiB in memory, best of {args.rounds}")
    base = None
    for name, fn in kinds:
        wall, cpu = _measure(fn, data, args.rounds)
        base = base or cpu
        print(f"  {name:24} {len(data) / wall / 1e6:9.0f} MB/s  {cpu:7.3f} CPU s  {cpu / base:6.2f}x crc32c's CPU")
    if args.pure:
        small = data[:4 * MIB]
        wall, cpu = _measure(crc64.py_crc64nvme, small, 1)
        print(f"  {'crc64nvme (pure Python)':24} {len(small) / wall / 1e6:9.1f} MB/s  (4 MiB)")


if __name__ == "__main__":
    main()
