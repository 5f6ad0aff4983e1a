#!/usr/bin/env python3
"""trainvisor's S3 upload path against boto3's `upload_file`, and checkpoint close -> upload start.

(1) Throughput: one moto S3 server process on 127.0.0.1, one file (default 256 MiB of random
bytes), the same TransferConfig (trainvisor's: 8 MiB parts, 8 threads). Rounds alternate
`boto3 upload_file` (the baseline) and `S3Uploader.upload` (trainvisor's path, including its
verification: every part's md5 against the ETag the store returns, the object's multipart ETag
and length by HEAD); medians of wall and CPU seconds (this process, every thread: the server
is another process) and their ratios are printed. Target: trainvisor at least 1.0x the baseline's
throughput and at most 1.0x its CPU seconds. On a small machine that also runs the server, the
client competes with the server for CPU, so `--pin` gives each its own CPU, as when the store is
elsewhere.

(2) Latency: the real watcher (inotify) hands complete Caffe checkpoints to the real
UploadManager, whose uploader is S3Uploader to the same server; printed is the time from the
close of each set's last file to the moment the first file of that set enters `upload`.
Target: median under 0.5 s.

(3) With `--two`: two destinations in one run (two buckets of the same server, one manager each,
as `--upload-to` repeated builds them, no rate limit), the file handed to both at once; each
destination's time to its verified set against the baseline's. Target: each at least 0.45x
(the two share the client's CPU and the one server).

    python bench/upload_throughput.py [--size-mib 256] [--rounds 9] [--n 20] [--two]
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from _common import OUT, ROOT  # noqa: F401  (puts the repo on sys.path)

MIB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(cpu: "int | None" = None) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, preexec_fn=pin)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto_server did not start")


def big_file(size: int) -> str:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"upload-{size >> 20}mib.bin"
    if not path.exists() or path.stat().st_size != size:
        with open(path, "wb") as fh:
            for _ in range(size // MIB):
                fh.write(os.urandom(MIB))
    return str(path)


def throughput(url: str, path: str, rounds: int) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(wall seconds, CPU seconds of this process: every thread, the senders' included) of
    each upload; the server is another process, so its CPU is not counted on either side."""
    import boto3

    from trainvisor.uploaders.s3 import S3Uploader

    up = S3Uploader("bench", url="s3://bench", endpoint_url=url)
    client = boto3.session.Session().client("s3", endpoint_url=url)
    client.create_bucket(Bucket="bench")
    base, ours = [], []
    for r in range(rounds):
        for label, out in (("boto3", base), ("trainvisor", ours)):
            key = f"{label}-{r}"
            t0, c0 = time.perf_counter(), time.process_time()
            if label == "boto3":
                client.upload_file(path, "bench", key, Config=up.config)
            else:
                up.upload(path, key)
            out.append((time.perf_counter() - t0, time.process_time() - c0))
            client.delete_object(Bucket="bench", Key=key)  # moto keeps objects in memory
    return base, ours


class _StartTimes:
    """Wraps an uploader; records when each key's upload starts."""

    def __init__(self, inner) -> None:
        self.inner, self.url = inner, inner.url
        self.started: dict[str, float] = {}
        self.cond = threading.Condition()

    def preflight(self) -> None:
        self.inner.preflight()

    def upload(self, local_path, key, *, progress=None):
        with self.cond:
            self.started.setdefault(key, time.monotonic())
            self.cond.notify_all()
        return self.inner.upload(local_path, key, progress=progress)


def close_to_upload_start(url: str, n: int, size: int) -> list[float]:
    from trainvisor.uploaders.manager import UploadManager
    from trainvisor.uploaders.s3 import S3Uploader
    from trainvisor.watch import CheckpointWatcher

    timing = _StartTimes(S3Uploader("bench", url="s3://bench/lat", endpoint_url=url))
    block = os.urandom(MIB)
    out = []
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as run_dir:
        manager = UploadManager(timing, run_dir=run_dir, run_id="r", prefix="lat")
        try:
            with CheckpointWatcher([d], consumer=manager):
                for i in range(1, n + 1):
                    name = f"bench_iter_{i}"
                    for ext in (".caffemodel", ".solverstate"):
                        with open(os.path.join(d, name + ext), "wb") as fh:
                            for _ in range(size // MIB):
                                fh.write(block)
                    closed = time.monotonic()
                    key = f"lat/r/{name}.caffemodel"
                    with timing.cond:
                        timing.cond.wait_for(lambda: key in timing.started, 30)
                    out.append(timing.started[key] - closed)
                manager.drain(120)
        finally:
            manager.close()
    return out


def two_destinations(url: str, path: str, rounds: int) -> tuple[list[float], list[float]]:
    """(3) Two destinations in one run: buckets bench-a and bench-b of the same server, one
    UploadManager each (as `--upload-to s3://bench-a --upload-to s3://bench-b` builds them:
    run/build.py, no rate limit), the file handed to both at once as one checkpoint set; each
    destination's seconds from the hand-over to its set verified (journal, upload, verification,
    manifest), per round."""
    import boto3

    from trainvisor.config.schema import UploadConfig
    from trainvisor.events import Checkpoint, CheckpointFile
    from trainvisor.run.build import build_managers, open_destinations

    client = boto3.session.Session().client("s3", endpoint_url=url)
    for bucket in ("bench-a", "bench-b"):
        client.create_bucket(Bucket=bucket)
    os.environ["AWS_ENDPOINT_URL"] = url
    cfg = UploadConfig(to=("s3://bench-a/two", "s3://bench-b/two"))
    secs: tuple[list[float], list[float]] = ([], [])
    for r in range(rounds):
        with tempfile.TemporaryDirectory() as run_dir:
            group = build_managers(cfg, open_destinations(cfg, run_dir=run_dir), run_dir=run_dir, run_id=f"r{r}")
            try:
                cp = Checkpoint(f"big_iter_{r}", (CheckpointFile(path, os.path.basename(path)),), r, None,
                                os.path.dirname(path))
                t0 = time.perf_counter()
                futures = [m.submit(cp) for m in group.managers]
                for out, f in zip(secs, futures):
                    f.add_done_callback(lambda _f, out=out: out.append(time.perf_counter() - t0))
                group.drain(600)
            finally:
                group.close()
        for bucket in ("bench-a", "bench-b"):  # moto keeps objects in memory
            for o in client.list_objects_v2(Bucket=bucket).get("Contents", ()):
                client.delete_object(Bucket=bucket, Key=o["Key"])
    return secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--n", type=int, default=20, help="checkpoints for the latency figure")
    ap.add_argument("--pin", action="store_true",
                    help="server on CPU 1, uploads on CPU 0: the store on its own machine, as in production")
    ap.add_argument("--two", action="store_true", help="also (3): two destinations at once, against the baseline")
    a = ap.parse_args()
    if a.pin:
        os.sched_setaffinity(0, {0})
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      AWS_EC2_METADATA_DISABLED="true")
    path = big_file(a.size_mib * MIB)
    proc, url = start_moto(1 if a.pin else None)
    try:
        base, ours = throughput(url, path, a.rounds)
        lat = close_to_upload_start(url, a.n, 4 * MIB)
        two = two_destinations(url, path, max(3, a.rounds // 3)) if a.two else None
    finally:
        proc.terminate()
        proc.wait(10)
    size = a.size_mib * MIB
    mb = size / 1e6
    b, o = statistics.median(w for w, _ in base), statistics.median(w for w, _ in ours)
    bc, oc = statistics.median(c for _, c in base), statistics.median(c for _, c in ours)
    where = "server on CPU 1, client on CPU 0" if a.pin else "server and client sharing all CPUs"
    print(f"S3 upload of {a.size_mib} MiB to moto on 127.0.0.1 ({where}), {a.rounds} alternating rounds, medians")
    print(f"  boto3 upload_file (baseline)      : {b:6.2f} s  {mb / b:7.1f} MB/s")
    print(f"  trainvisor S3Uploader (+ verify)  : {o:6.2f} s  {mb / o:7.1f} MB/s")
    print(f"  ratio trainvisor/baseline throughput: {b / o:.2f}x (target >= 1.0x: {'met' if b / o >= 1.0 else 'NOT met'})")
    print(f"  CPU seconds (this process, all threads): boto3 {bc:.2f} s, trainvisor {oc:.2f} s")
    print(f"  ratio trainvisor/baseline CPU: {oc / bc:.2f}x (target <= 1.0x: {'met' if oc / bc <= 1.0 else 'NOT met'})")
    lat.sort()
    p90 = lat[int(0.9 * (len(lat) - 1))]
    med = statistics.median(lat)
    print(f"checkpoint close -> upload start (inotify, {a.n} Caffe sets of 2 x 4 MiB): median {med * 1000:.1f} ms, "
          f"p90 {p90 * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms (target median < 500 ms: "
          f"{'met' if med < 0.5 else 'NOT met'})")
    if two is not None:
        print(f"two destinations in one run (two buckets of the same server, no rate limit), {len(two[0])} rounds, "
              f"medians: each destination's hand-over -> set verified")
        for name, times in zip(("s3://bench-a", "s3://bench-b"), two):
            t = statistics.median(times)
            print(f"  {name:<13}: {t:6.2f} s  {mb / t:7.1f} MB/s  ratio to boto3 upload_file {b / t:.2f}x "
                  f"(target >= 0.45x: {'met' if b / t >= 0.45 else 'NOT met'})")


if __name__ == "__main__":
    main()
