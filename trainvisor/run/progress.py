"""Waiting for uploads where a person can see it: bytes, rate, ETA and files, redrawn in place on
a terminal, a line every few seconds elsewhere. Shared by `trainvisor run` (draining at exit) and
`trainvisor upload`."""
from __future__ import annotations

import logging
import time
from typing import Callable, Optional, TextIO

__all__ = ["format_progress", "human_bytes", "drain_showing_progress", "log_outcome", "throughput_text"]

log = logging.getLogger("trainvisor")


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def format_progress(done: int, total: int, elapsed: float, files_done: int, files_total: int) -> str:
    """`12.3 MB / 45.6 MB  3.4 MB/s  ETA 0:10  1/3 files`; the rate is the average so far."""
    rate = done / elapsed if elapsed > 0 else 0.0
    if rate > 0 and total > done:
        left = int((total - done) / rate)
        eta = f"ETA {left // 60}:{left % 60:02d}"
    else:
        eta = "ETA --:--" if total > done else "done"
    return f"{human_bytes(done)} / {human_bytes(total)}  {human_bytes(rate)}/s  {eta}  {files_done}/{files_total} files"


def throughput_text(bytes_sent: int, seconds: float, limiter_wait: float) -> str:
    """`120.5 MB sent in 2.4 s (50.2 MB/s); 1.9 s waited on the rate limit`: what one destination's
    uploads cost in time (the rate over the seconds an upload was in flight)."""
    rate = bytes_sent / seconds if seconds > 0 else 0.0
    text = f"{human_bytes(bytes_sent)} sent in {seconds:.1f} s ({human_bytes(rate)}/s)"
    return text + (f"; {limiter_wait:.1f} s waited on the rate limit" if limiter_wait >= 0.05 else "")


def drain_showing_progress(manager, timeout: Optional[float], out: Optional[TextIO], *, prefix: str = "",
                           clock: Callable[[], float] = time.monotonic,
                           until: Optional[Callable[[], float]] = None):
    """`manager.drain`, for at most `timeout` seconds (None: until nothing is pending), showing
    progress on `out` (None: silently). `until`, asked between short waits, may bring the end
    closer (a shutdown's grace, begun or cut short by a signal meanwhile; `clock`'s time).
    Returns the last DrainReport."""
    if out is None and until is None:
        return manager.drain(timeout if timeout is not None else 1e9)
    start = clock()
    fixed = float("inf") if timeout is None else start + timeout
    tty = out is not None and out.isatty()
    interval = 0.2 if tty or out is None else 5.0
    while True:
        deadline = min(fixed, until()) if until is not None else fixed
        report = manager.drain(max(0.0, min(interval, deadline - clock())))
        if out is not None:
            p = manager.progress()
            line = prefix + format_progress(p.bytes_done, p.bytes_total, clock() - start, p.files_done, p.files_total)
            out.write(f"\r{line}\x1b[K" if tty else line + "\n")
            out.flush()
        # Sets too: a set's last file (its manifest) is journaled verified a moment before the set is.
        done = not (report.pending or report.sets.pending)
        if done or clock() >= min(deadline, until() if until is not None else deadline):
            break
    if tty:
        out.write("\n")
    return report


def log_outcome(report, *, within: str, destination: str = "") -> None:
    """One line per upload a DrainReport leaves pending (`within`: what it was given, e.g.
    "drain timeout 2s") or failed, then the closing count of checkpoint sets: "3 of 3 checkpoint
    sets verified", never a word like "all" that would also fit none; then what the uploads to
    `destination` cost in time, and the sets skipped as superseded."""
    for key in report.pending:
        log.warning("upload not finished within %s: %s", within, key)
    for key in report.failed:
        log.error("upload failed for good: %s (see the run log)", key)
    sets = report.sets
    verified, total = len(sets.verified), len(sets.verified) + len(sets.pending) + len(sets.failed)
    if report.pending or report.failed:
        log.warning("%d of %d checkpoint sets verified (%d pending, %d failed)", verified, total,
                    len(sets.pending), len(sets.failed))
    else:
        log.info("%d of %d checkpoint sets verified", verified, total)
    p = report.progress
    if p is not None and (p.bytes_sent or p.sets_skipped):
        skipped = f"; {p.sets_skipped} checkpoint set(s) skipped, superseded before their upload began" \
            if p.sets_skipped else ""
        log.info("uploads%s: %s%s", f" to {destination}" if destination else "",
                 throughput_text(p.bytes_sent, p.seconds, p.limiter_wait), skipped)
