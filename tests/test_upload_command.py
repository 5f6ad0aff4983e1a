"""`trainvisor upload PATH... --to URL`: once, verified, resumable, with progress."""
from __future__ import annotations

import os
import subprocess
import sys

from trainvisor.run.progress import format_progress

TRAINVISOR = [sys.executable, "-m", "trainvisor"]


def test_progress_line_shows_bytes_rate_eta_and_files():
    assert format_progress(25_000_000, 100_000_000, 5.0, 1, 4) == "25.0 MB / 100.0 MB  5.0 MB/s  ETA 0:15  1/4 files"
    assert format_progress(0, 10, 0.0, 0, 1) == "0 B / 10 B  0 B/s  ETA --:--  0/1 files"
    assert format_progress(10, 10, 1.0, 1, 1).endswith("done  1/1 files")


def test_directory_and_file_upload_once_and_a_second_run_skips_verified_files(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(os.urandom(3 << 20))
    (src / "sub" / "b.txt").write_text("hello")
    single = tmp_path / "single.pt"
    single.write_bytes(b"weights")
    dest = tmp_path / "dest"
    argv = TRAINVISOR + ["upload", str(src), str(single), "--to", f"file://{dest}", "--progress"]
    first = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert first.returncode == 0, first.stderr
    assert (dest / "a.bin").read_bytes() == (src / "a.bin").read_bytes()
    assert (dest / "sub" / "b.txt").read_text() == "hello" and (dest / "single.pt").read_bytes() == b"weights"
    assert "3/3 files" in first.stderr and "uploaded 3 file(s), 3.1 MB" in first.stderr
    second = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert second.returncode == 0
    assert "uploaded 0 file(s), 0 B, in " in second.stderr  # the rerun sent nothing, and says so
    assert "; 3 already in the store, verified, not sent" in second.stderr
    runs = list((tmp_path / "trainvisor-runs").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("upload-")  # same command, same journal


def test_missing_path_and_unwritable_destination_are_one_line_errors(tmp_path):
    missing = subprocess.run(TRAINVISOR + ["upload", str(tmp_path / "nope"), "--to", f"file://{tmp_path}/d"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert missing.returncode == 2 and missing.stderr == f"trainvisor: {tmp_path / 'nope'}: no such file or directory\n"
    (tmp_path / "f").write_text("x")
    (tmp_path / "blocker").write_text("a file where the store should be")
    bad = subprocess.run(TRAINVISOR + ["upload", str(tmp_path / "f"), "--to", f"file://{tmp_path}/blocker/store"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert bad.returncode == 3 and bad.stderr.count("\n") == 1 and "cannot write to file://" in bad.stderr
