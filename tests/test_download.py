"""`trainvisor download` from a file:// store that a real `trainvisor run --upload-to` filled:
the newest complete set byte for byte, a set by name, an interrupted download continued from its
part, a part of another object never continued, and a store whose objects do not match their
manifest refused with one line and nothing moved into place."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FAKE_CAFFE

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
SNAPSHOT = 1_500_000  # more than one 1 MiB read: an interruption can land inside a file
STATE_90 = "examples/mnist/lenet_iter_90.solverstate"  # the manifest's first file
WEIGHTS_90 = "examples/mnist/lenet_iter_90.caffemodel"
SET_90 = (STATE_90, WEIGHTS_90)


class Interrupted(Exception):
    """What the test's progress callback raises to cut a download short."""


def upload_run(work: Path, url: str, env=None, extra: tuple[str, ...] = ()) -> Path:
    """A fake-Caffe run of 90 iterations (a snapshot every 9) uploading to `url`; its snapshot dir."""
    work.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        TRAINVISOR + ["run", "--run-dir", str(work / "run"), "--run-id", "r1", "--watch", str(work / "snap"),
                      "--upload-to", url, "--", sys.executable, str(FAKE_CAFFE), "train", "--generate", "90",
                      "--snapshot-dir", str(work / "snap"), "--snapshot-size", str(SNAPSHOT), *extra],
        capture_output=True, cwd=work, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return work / "snap"


def stopping_after(limit: int):
    """A progress callback that interrupts the download once `limit` bytes arrived."""
    seen = [0]

    def progress(n: int) -> None:
        seen[0] += n
        if seen[0] >= limit:
            raise Interrupted()

    return progress


@pytest.fixture(scope="module")
def uploaded(tmp_path_factory):
    """(store root, snapshot dir) of one run; tests that change the store work on a copy."""
    work = tmp_path_factory.mktemp("download-run")
    snap = upload_run(work, f"file://{work / 'store'}")
    return work / "store", snap


@pytest.fixture
def store(uploaded, tmp_path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(uploaded[0], copy)
    return copy


def download_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(TRAINVISOR + ["download", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_the_newest_set_is_downloaded_byte_for_byte(uploaded, tmp_path):
    root, snap = uploaded
    done = download_cli(f"file://{root}/r1", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == (f"downloaded set lenet_iter_90 (2 file(s), 3.0 MB received) from file://{root}/r1 "
                           f"into {tmp_path / 'out'}, verified\n")
    got = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert got == sorted(SET_90)  # no part or record left beside them
    for rel in SET_90:
        assert (tmp_path / "out" / rel).read_bytes() == (snap / rel).read_bytes()


def test_set_names_an_older_set_and_the_url_may_stop_above_the_run(uploaded, tmp_path):
    import trainvisor

    root, snap = uploaded
    report = trainvisor.download(f"file://{root}", tmp_path / "out", set_name="lenet_iter_45")
    assert (report.set, report.iteration, report.manifest_key) == ("lenet_iter_45", 45, "r1/lenet_iter_45.manifest.json")
    assert report.bytes == 2 * SNAPSHOT and report.resumed == () and report.verified
    for path in report.files:
        assert Path(path).read_bytes() == (snap / Path(path).relative_to(tmp_path / "out")).read_bytes()


def test_no_set_at_all_is_one_clear_line(tmp_path):
    (tmp_path / "empty").mkdir()
    done = download_cli(f"file://{tmp_path / 'empty'}", "-o", "out", cwd=tmp_path)
    assert done.returncode == 3
    assert done.stderr == f"trainvisor: no checkpoint set under file://{tmp_path / 'empty'} (no *.manifest.json found)\n"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_an_object_that_only_looks_like_a_manifest_is_passed_over_with_a_warning(store, tmp_path):
    (store / "r1" / "notes.manifest.json").write_text("[1, 2]")
    done = download_cli(f"file://{store}/r1", "-o", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    warning, result = done.stderr.splitlines()
    assert warning == "trainvisor: notes.manifest.json is not a manifest trainvisor can read (list indices must be " \
                      "integers or slices, not str): skipped"
    assert result.startswith("downloaded set lenet_iter_90 (2 file(s)")


def test_an_interrupted_download_continues_from_its_part(uploaded, tmp_path):
    import trainvisor

    root, snap = uploaded
    out = tmp_path / "out"
    with pytest.raises(Interrupted):
        trainvisor.download(f"file://{root}", out, progress=stopping_after(1 << 20))
    part = out / (STATE_90 + ".part")
    assert part.stat().st_size == 1 << 20  # one 1 MiB piece received, then cut
    assert not (out / STATE_90).exists()
    report = trainvisor.download(f"file://{root}", out)
    assert report.resumed == (STATE_90,)
    assert report.bytes == 2 * SNAPSHOT - (1 << 20)  # the part's bytes were not read again
    for rel in SET_90:
        assert (out / rel).read_bytes() == (snap / rel).read_bytes()
    assert not part.exists() and not (out / (STATE_90 + ".part.json")).exists()
    from trainvisor.uploaders import open_uploader

    reader = open_uploader(f"file://{root}")
    assert reader.stat_object(f"r1/{STATE_90}").size == SNAPSHOT and reader.stat_object("r1/none") is None


def test_a_part_of_another_object_is_started_over(uploaded, tmp_path):
    import trainvisor

    root, snap = uploaded
    out = tmp_path / "out"
    with pytest.raises(Interrupted):
        trainvisor.download(f"file://{root}", out, set_name="lenet_iter_81", progress=stopping_after(1 << 20))
    # The same relative path's part, left by set 81; set 90's record differs (key, checksum).
    shutil.move(out / "examples/mnist/lenet_iter_81.solverstate.part", out / (STATE_90 + ".part"))
    shutil.move(out / "examples/mnist/lenet_iter_81.solverstate.part.json", out / (STATE_90 + ".part.json"))
    report = trainvisor.download(f"file://{root}", out)
    assert report.resumed == () and report.bytes == 2 * SNAPSHOT
    assert (out / STATE_90).read_bytes() == (snap / STATE_90).read_bytes()


def test_changed_bytes_are_refused_and_nothing_is_moved_into_place(store, tmp_path):
    weights = store / "r1" / WEIGHTS_90
    data = bytearray(weights.read_bytes())
    data[1000] ^= 0xFF
    weights.write_bytes(bytes(data))  # same size: only the checksum can tell
    want = json.loads((store / "r1/lenet_iter_90.manifest.json").read_text())["files"][1]["checksum"]
    done = download_cli(f"file://{store}", "-o", "out", cwd=tmp_path)
    assert done.returncode == 3
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"trainvisor: set lenet_iter_90 refused, nothing moved into out: {WEIGHTS_90}: checksum {want} in the "
        "manifest, sha256:")
    left = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    # The good file waits as a verified part (a rerun continues it); the bad one is gone.
    assert left == [STATE_90 + ".part", STATE_90 + ".part.json"]


def test_a_changed_size_or_missing_object_is_refused_by_name_and_latest_falls_back(store, uploaded, tmp_path):
    import trainvisor
    from trainvisor.uploaders.sets import SetChoiceError

    with open(store / "r1" / WEIGHTS_90, "ab") as f:
        f.write(b"x")
    (store / "r1/examples/mnist/lenet_iter_81.solverstate").unlink()
    done = download_cli(f"file://{store}", "--set", "lenet_iter_90", "-o", "out", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (3, f"trainvisor: set 'lenet_iter_90' refused: {WEIGHTS_90}: size "
                                                 f"{SNAPSHOT} in the manifest, {SNAPSHOT + 1} in the store\n")
    with pytest.raises(SetChoiceError, match=r"^set 'lenet_iter_81' refused: examples/mnist/lenet_iter_81"
                                             r"\.solverstate: missing from the store \(r1/examples"):
        trainvisor.download(f"file://{store}", tmp_path / "out", set_name="lenet_iter_81")
    assert not (tmp_path / "out").exists()
    report = trainvisor.download(f"file://{store}", tmp_path / "out")  # 90 and 81 are not whole: 72 is
    assert report.set == "lenet_iter_72"
    assert report.passed_over == (f"lenet_iter_81: {STATE_90.replace('90', '81')}: missing from the store "
                                  f"(r1/{STATE_90.replace('90', '81')})",
                                  f"lenet_iter_90: {WEIGHTS_90}: size {SNAPSHOT} in the manifest, {SNAPSHOT + 1} in the store")
    assert Path(report.files[0]).read_bytes() == (uploaded[1] / "examples/mnist/lenet_iter_72.solverstate").read_bytes()
