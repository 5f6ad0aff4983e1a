"""Binary output (a program dumping bytes to its stdout) is passed through unchanged and not
parsed: the run ends soon after the child (it took 14.6 s for 50 MB, grinding regex searches and
terminal emulation over garbage), says how many bytes it skipped, and the text around it is
parsed with its line numbers right. A real log padded with NULs is still text."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from trainvisor import Run, RunConfig
from trainvisor.config import ParsingConfig, RunDirConfig
from trainvisor.stream.engine import looks_binary

from .conftest import real_logs

CHILD = r"""
import os, random
w = lambda b: os.write(1, b)
w(b"step 1 loss=0.5\n")
junk = random.Random(7).randbytes(8 << 20)          # 8 MiB of a tensor's raw bytes
for i in range(0, len(junk), 65536):
    w(junk[i:i + 65536])
w(b"\nstep 2 loss=0.25\n")
"""


def test_binary_output_is_passed_through_counted_and_the_text_after_it_parsed(tmp_path):
    script = tmp_path / "dump.py"
    script.write_text(CHILD)
    out = tmp_path / "out.bin"
    with open(out, "wb") as fh:
        summary = Run(RunConfig(command=(sys.executable, str(script)), parsing=ParsingConfig(parser="generic"),
                                run=RunDirConfig(dir=str(tmp_path / "run"))), stdout_fd=fh.fileno(), stderr_fd=None).run()
    data = out.read_bytes()
    expected = subprocess.run([sys.executable, str(script)], capture_output=True).stdout
    assert data == expected  # every byte passed through
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last_line = expected.count(b"\n")  # the second step's line number, counting the junk's newlines
    assert [(r["name"], r["value"], r["line"]) for r in records] == [("loss", 0.5, 1), ("loss", 0.25, last_line)]
    # what was skipped: the junk's chunks (a chunk sharing text with it is skipped whole)
    assert 8 << 20 <= summary.binary_bytes <= (8 << 20) + 2 * 65536
    from trainvisor.summary import format_summary

    assert f"  NOT PARSED     {summary.binary_bytes} bytes that looked binary (passed through unchanged)" in \
        format_summary(summary).splitlines()


def test_text_logs_never_look_binary_nul_padding_included():
    for framework in ("caffe", "keras", "lightning", "huggingface", "yolo", "darknet"):
        for log in real_logs(framework).glob("*.log"):
            data = log.read_bytes()
            chunks = [data[i:i + 65536] for i in range(0, len(data), 65536)]
            assert not any(looks_binary(c) for c in chunks), log.name
    assert looks_binary(os.urandom(65536))
