"""Bad input gets one clear line on stderr and an exit code, never a traceback."""
from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import KODO_AK

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


def test_a_destination_written_wrong_exits_2_one_that_refuses_exits_3_one_down_lets_the_training_start(
        tmp_path, kodo):
    """The README's codes for a bad destination: Kodo without keys cannot be used as written
    (configuration, 2, before the training starts); keys the store refuses (3, before the training
    starts); a store that cannot be reached is an outage: one warning, the training starts."""
    import os
    import socket

    env = {k: v for k, v in os.environ.items() if not k.startswith(("QINIU_", "AWS_"))}
    with socket.socket() as closed:  # a loopback port nobody listens on once this block ends
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    argv = TRAINVISOR + ["run", "-q", "--run-dir", "r", "--upload-to", "kodo://ckpt/team", "--",
                         sys.executable, "-c", "open('started', 'w')"]
    no_keys = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path,
                             env={**env, "QINIU_UP_HOST": f"http://127.0.0.1:{port}"})
    assert no_keys.returncode == 2 and no_keys.stderr.count("\n") == 1
    assert "QINIU_ACCESS_KEY and QINIU_SECRET_KEY must be set" in no_keys.stderr
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, env={
        **env, "QINIU_UP_HOST": kodo.url, "QINIU_RS_HOST": kodo.url,
        "QINIU_ACCESS_KEY": KODO_AK, "QINIU_SECRET_KEY": "sk-not-shown"})
    assert refused.returncode == 3 and refused.stderr.count("\n") == 1, refused.stderr
    assert not (tmp_path / "started").exists()  # neither started the training
    unreachable = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, env={
        **env, "QINIU_UP_HOST": f"http://127.0.0.1:{port}", "QINIU_RS_HOST": f"http://127.0.0.1:{port}",
        "QINIU_ACCESS_KEY": "ak", "QINIU_SECRET_KEY": "sk-not-shown"})
    assert unreachable.returncode == 0, unreachable.stderr
    assert (tmp_path / "started").exists()  # the outage did not hold the training
    said = [line for line in (tmp_path / "r" / "train.log").read_text().splitlines() if "cannot be reached" in line]
    assert len(said) == 1 and "upload destination kodo://ckpt/team" in said[0]  # -q: the run log alone
    assert "Traceback" not in no_keys.stderr + refused.stderr + unreachable.stderr
    assert "sk-not-shown" not in refused.stderr + unreachable.stderr + said[0]
