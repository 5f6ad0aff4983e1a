"""A compressed saved log (gzip, bzip2, xz) replays and parses as the log it holds; a Zstandard
one and a damaged one are one-line errors, never 0 records in silence or a traceback."""
from __future__ import annotations

import bz2
import gzip
import lzma
import subprocess
import sys

import pytest

import trainvisor

from .conftest import ROOT, real_logs

COMPRESS = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


def _log():
    return real_logs("caffe") / "bearpaw-fork-mnist.log"


@pytest.mark.parametrize("suffix", sorted(COMPRESS))
def test_a_compressed_real_log_gives_the_plain_logs_records(tmp_path, suffix):
    plain = _log()
    packed = tmp_path / f"mnist.log.{suffix}"
    packed.write_bytes(COMPRESS[suffix](plain.read_bytes()))
    want = [m.without_wall_time() for m in trainvisor.replay(plain, year=2016).metrics]
    got = [m.without_wall_time() for m in trainvisor.replay(packed, year=2016).metrics]
    assert len(want) > 100 and got == want


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainvisor", *args], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_replay_of_a_gzip_log_on_the_command_line(tmp_path):
    packed = tmp_path / "mnist.log.1.gz"  # as logrotate's compress leaves it
    packed.write_bytes(gzip.compress(_log().read_bytes()))
    proc = _cli("replay", str(packed), "--year", "2016", "--metrics", str(tmp_path / "m.jsonl"))
    assert proc.returncode == 0, proc.stderr
    n = len((tmp_path / "m.jsonl").read_text().splitlines())
    assert n == len(trainvisor.replay(_log(), year=2016).events)


def test_zstandard_and_damaged_logs_are_one_line_errors(tmp_path):
    zst = tmp_path / "a.log.zst"
    zst.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 64)
    proc = _cli("replay", str(zst))
    assert (proc.returncode, proc.stderr.strip()) == (
        2, f"trainvisor: {zst}: a Zstandard-compressed log, which this Python cannot read: "
           f"decompress it first (zstd -d {zst})")
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(gzip.compress(_log().read_bytes())[:5000])
    proc = _cli("replay", str(cut), "--year", "2016")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith(f"trainvisor: {cut}: the gzip stream is damaged or cut short: ")


def test_the_fake_training_plays_a_compressed_log_as_the_log_it_holds(tmp_path):
    packed = tmp_path / "mnist.log.xz"
    packed.write_bytes(lzma.compress(_log().read_bytes()))
    proc = subprocess.run([sys.executable, "-m", "trainvisor", "fake-training", str(packed), "--no-snapshots"],
                          capture_output=True, timeout=120, cwd=tmp_path,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == _log().read_bytes() and proc.stdout == b""  # Caffe's glog: stderr
