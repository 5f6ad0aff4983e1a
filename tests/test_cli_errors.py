"""Bad input gets one clear line on stderr and an exit code, never a traceback."""
from __future__ import annotations

import subprocess
import sys

import pytest

TRAINVISOR = [sys.executable, "-m", "trainvisor"]


@pytest.mark.parametrize("args, code, message", [
    (["run", "--parser", "nope", "--run-dir", "{tmp}/r", "--", "true"], 2,
     "trainvisor: unknown parser 'nope' (available: auto, caffe, "),
    (["replay", "{tmp}/missing.log"], 2, "trainvisor: cannot read {tmp}/missing.log: No such file or directory"),
    (["run", "--run-dir", "/proc/trainvisor-cannot-be-here", "--", "true"], 1,
     "trainvisor: No such file or directory: /proc/trainvisor-cannot-be-here"),
    (["parse", "{tmp}/x.log", "--csv", "/proc/nope"], 1, "trainvisor: No such file or directory: /proc/nope"),
    (["run", "--kill-timeout", "soon", "--", "true"], 2, "Invalid value for '--kill-timeout'"),
])
def test_errors_are_one_line_without_traceback(args, code, message, tmp_path):
    (tmp_path / "x.log").write_text("I0101 00:00:00.000001 1 solver.cpp:1] Iteration 1, loss = 1\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = subprocess.run(TRAINVISOR + args, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == code
    assert message.replace("{tmp}", str(tmp_path)) in proc.stderr
    assert "Traceback" not in proc.stderr
