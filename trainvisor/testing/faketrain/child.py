"""The fake training's process: the log's bytes out at a chosen rate, the announced checkpoint
files written, signals met as the framework meets them, then the exit asked for.

Sleeping is this program's job (it stands in for a training that takes time); tests never
sleep, they wait on it."""
from __future__ import annotations

import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from .plan import Plan, caffe_prefix, make_plan
from .profiles import (SIGINT_DIE, SIGINT_IGNORE, SIGINT_LIGHTNING, SIGINT_SNAPSHOT, SIGTERM_GLOG, SIGTERM_IGNORE,
                       Profile)
from .writers import WRITTEN_AFTER, files_of, sandboxed, write_file

__all__ = ["FakeOptions", "run_fake"]

_GLOG_HEAD = re.compile(rb"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6}\s+\d+ ")
_TRACEBACK = (b"Traceback (most recent call last):\n"
              b"  File \"train.py\", line 1, in <module>\n"
              b"KeyboardInterrupt\n")
_LIGHTNING = b"\nDetected KeyboardInterrupt, attempting graceful shutdown ...\n"


@dataclass(frozen=True)
class FakeOptions:
    """`rate`: lines per second (0: as fast as the pipe takes them). `framework`: a parser name
    (default: the one `auto` picks for the log). `stream`: ``stdout``/``stderr`` (default: the
    framework's, see profiles.py). `snapshot_dir`: where announced relative paths are rooted (the
    working directory by default). `linger`: seconds to stay alive after the last line (a signal
    may still come). `die_by_signal`: a name (``KILL``, ``SEGV``) to die of instead of exiting.
    `profile`: play this variant instead of the framework's. `writer(kind, path)`: writes each
    checkpoint file (default: `snapshot_size` bytes)."""

    log: str
    rate: float = 0.0
    framework: Optional[str] = None
    stream: Optional[str] = None
    snapshots: bool = True
    snapshot_dir: str = "."
    snapshot_size: int = 1024
    exit_code: int = 0
    die_by_signal: Optional[str] = None
    linger: float = 0.0
    profile: Optional[Profile] = None
    writer: Optional[Callable[[str, Path], None]] = None


class _Child:
    """One fake training: the plan, where it writes, and the signals received (set by handlers,
    acted on between lines, as Caffe's solver checks its flags between iterations)."""

    def __init__(self, plan: Plan, opts: FakeOptions) -> None:
        self.plan, self.opts = plan, opts
        self.profile = opts.profile or plan.profile
        self.fd = 2 if (opts.stream or self.profile.stream) == "stderr" else 1
        self.root = Path(opts.snapshot_dir)
        self.stop = self.snapshot_now = self.open_line = False
        self.iteration, self.prefix, self.glog_head = 0, "snapshot", b"I0101 00:00:00.000000  4242 "

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def save(self, kind: str, path: str) -> None:
        if self.opts.snapshots:
            for f in files_of(kind, sandboxed(path, self.root)):
                if self.opts.writer is not None:
                    self.opts.writer(kind, f)
                else:
                    write_file(f, self.opts.snapshot_size)
        if kind == "weights":
            self.prefix = caffe_prefix(path) or self.prefix

    def line(self, number: int, raw: bytes) -> None:
        saves = self.plan.saves.get(number, ())
        for s in saves:
            if s.kind not in WRITTEN_AFTER:
                self.save(s.kind, s.path)
        self.write(raw)
        self.open_line = not raw.endswith(b"\n")
        for s in saves:
            if s.kind in WRITTEN_AFTER:
                self.save(s.kind, s.path)
        self.iteration = self.plan.iterations.get(number, self.iteration)
        head = _GLOG_HEAD.match(raw)
        if head:
            self.glog_head = head.group(0)

    def caffe_snapshot(self) -> None:
        """What Caffe's solver prints and writes when a signal asks for a snapshot."""
        stem = f"{self.prefix}_iter_{self.iteration}"
        if self.open_line:  # a log cut mid-line: glog's lines start on their own
            self.write(b"\n")
            self.open_line = False
        for text, kind, ext in ((b"Snapshotting to binary proto file", "weights", "caffemodel"),
                                (b"Snapshotting solver state to binary proto file", "solverstate", "solverstate")):
            self.write(self.glog_head + b"solver.cpp:454] " + text
                       + f" {stem}.{ext}\n".encode())
            self.save(kind, f"{stem}.{ext}")

    def run(self) -> int:
        interval = 1.0 / self.opts.rate if self.opts.rate > 0 else 0.0
        next_t = time.monotonic()
        for number, raw in enumerate(self.plan.lines, 1):
            if self.pending():
                return 0
            self.line(number, raw)
            if interval:
                next_t += interval
                _sleep_until(next_t)
        deadline = time.monotonic() + self.opts.linger
        while time.monotonic() < deadline:
            if self.pending():
                return 0
            _sleep_until(min(deadline, time.monotonic() + 0.05))
        return self.end()

    def pending(self) -> bool:
        """Act on Caffe's flags: a SIGHUP snapshot goes on, a SIGINT stop snapshots and ends."""
        if self.snapshot_now:
            self.snapshot_now = False
            self.caffe_snapshot()
        if self.stop:
            self.caffe_snapshot()
            self.write(self.glog_head + b"solver.cpp:327] Optimization stopped early.\n")
            return True
        return False

    def end(self) -> int:
        if self.opts.die_by_signal:
            _die(_signal_named(self.opts.die_by_signal))
        return self.opts.exit_code


def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _signal_named(name: str) -> int:
    return getattr(signal, "SIG" + name.upper().removeprefix("SIG"))


def _die(sig: int) -> None:
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    time.sleep(5)  # a stopped or delayed signal: never fall through to a normal exit
    sys.exit(128 + sig)


def _install(child: _Child) -> None:
    """The framework's handlers. Python frameworks keep Python's SIGINT (KeyboardInterrupt)."""
    on_sigint, on_sigterm = child.profile.on_sigint, child.profile.on_sigterm
    if on_sigint == SIGINT_SNAPSHOT:
        signal.signal(signal.SIGINT, lambda *_: setattr(child, "stop", True))
        signal.signal(signal.SIGHUP, lambda *_: setattr(child, "snapshot_now", True))
    else:
        signal.signal(signal.SIGINT, {SIGINT_DIE: signal.SIG_DFL, SIGINT_IGNORE: signal.SIG_IGN}.get(
            on_sigint, signal.default_int_handler))
    if on_sigterm == SIGTERM_GLOG:
        def glog_sigterm(signum: int, frame: object) -> None:
            child.write(f"*** Aborted at {int(time.time())} (unix time) try \"date -d @{int(time.time())}\" "
                        f"if you are using GNU date ***\n*** SIGTERM (@0x0) received by PID {os.getpid()}; "
                        f"stack trace: ***\n".encode())
            _die(signal.SIGTERM)
        signal.signal(signal.SIGTERM, glog_sigterm)
    else:
        signal.signal(signal.SIGTERM, signal.SIG_IGN if on_sigterm == SIGTERM_IGNORE else signal.SIG_DFL)


def run_fake(opts: FakeOptions, plan: Optional[Plan] = None) -> int:
    """Play `opts.log` (or a `plan` already made of it); returns the exit code (or dies of the
    signal asked for, or of the one the framework dies of)."""
    if plan is None:
        plan = make_plan(Path(opts.log), framework=opts.framework)
    child = _Child(plan, opts)
    _install(child)
    try:
        return child.run()
    except KeyboardInterrupt:
        if child.profile.on_sigint == SIGINT_LIGHTNING:
            os.write(2, _LIGHTNING)
            return 1
        os.write(2, _TRACEBACK)  # SIGINT_TRACEBACK: what Python prints for an uncaught KeyboardInterrupt
        _die(signal.SIGINT)
        return 130
