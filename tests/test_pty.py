"""`trainvisor run --pty`: the child sees a terminal (so frameworks print live bars as for a
person), its bytes still pass through unchanged, and the window follows trainvisor's terminal."""
from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import time

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
CHILD = r"""
import os, signal, sys, time
print("tty", sys.stdout.isatty(), sys.stderr.isatty(), os.get_terminal_size(1).columns, os.get_terminal_size(1).lines)
for i in range(1, 4):
    sys.stderr.write(f"\rEpoch 1: {i * 33}%|###| {i}/3 [00:00<00:00, loss=0.{9 - i}]")
    sys.stderr.flush()
sys.stderr.write("\n")
print("step 3 loss: 0.25", flush=True)
if len(sys.argv) > 1:
    signal.signal(signal.SIGWINCH, lambda *a: print("resized", os.get_terminal_size(1).columns, flush=True) or os._exit(0))
    print("waiting", flush=True)
    time.sleep(20)
"""


def test_the_child_sees_a_terminal_and_its_bytes_pass_through_unchanged(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    proc = subprocess.run(TRAINVISOR + ["run", "-q", "--pty", "--run-dir", "r", "--parser", "generic", "--",
                                        sys.executable, "child.py"], cwd=tmp_path, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    bars = "".join(f"\rEpoch 1: {i * 33}%|###| {i}/3 [00:00<00:00, loss=0.{9 - i}]" for i in range(1, 4))
    # stdout and stderr share the one terminal; no \r\n translation: the child's own bytes
    assert proc.stdout == f"tty True True 200 50\n{bars}\nstep 3 loss: 0.25\n".encode()
    assert proc.stderr == b""
    records = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    # every state of the \r-redrawn bar reaches the parser (the terminal line model), each
    # postfix value once, running until the bar's count reaches its total
    assert [(r["name"], r["value"], r["line"], r.get("running", False)) for r in records] == [
        ("loss", 0.8, 2, True), ("loss", 0.7, 2, True), ("loss", 0.6, 2, False), ("loss", 0.25, 3, False)]


def _pty_of_size(rows: int, cols: int) -> tuple[int, int]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    return master, slave


def test_the_window_follows_trainvisors_terminal_and_its_resizes(tmp_path):
    (tmp_path / "child.py").write_text(CHILD)
    master, slave = _pty_of_size(30, 100)
    tv = subprocess.Popen(TRAINVISOR + ["run", "-q", "--pty", "--run-dir", "r", "--", sys.executable, "child.py",
                                        "wait"], cwd=tmp_path, stdout=slave, stderr=subprocess.DEVNULL)
    os.close(slave)
    out = b""
    try:
        deadline = time.monotonic() + 30
        while b"waiting" not in out and time.monotonic() < deadline:
            out += os.read(master, 4096)
        assert out.startswith(b"tty True True 100 30")
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 132, 0, 0))
        tv.send_signal(signal.SIGWINCH)
        # the child's print() may reach the terminal in pieces (unbuffered): read up to the line's end
        while not re.search(rb"resized[^\n]*\n", out) and time.monotonic() < deadline:
            out += os.read(master, 4096)
        assert re.search(rb"resized 132\r?\n", out), out
        assert tv.wait(timeout=30) == 0
    finally:
        if tv.poll() is None:
            tv.kill()
            tv.wait()
        os.close(master)
