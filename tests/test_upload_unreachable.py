"""A destination that cannot be reached when the run starts (issue 24): the training starts, the
destination's sets wait in its journal and go once it answers; the others never wait on it. A
store that refuses (403) still stops the run in one line before the training starts. Real parts:
`trainvisor run` of a fake Caffe, moto's S3 server behind the fault proxy, a file:// directory."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.faultproxy import FaultProxy
from tests.test_process_tree import wait_for
from tests.test_upload_destinations import PLAIN, SETS, _bucket, _set_times
from trainvisor.run.summaryfile import read_summary

from .conftest import FAKE_CAFFE, s3_env

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
# moto's servers in one process share their buckets: each test has a bucket of its own.
S3_URL = "s3://late/p"


def _argv(work: Path, *options: str) -> list[str]:
    """A fake Caffe of 1000 iterations writing ten 16 KiB snapshot sets (two files each)."""
    return TRAINVISOR + ["run", "--run-dir", str(work / "run"), "--run-id", "r1", "--watch", str(work / "snap"),
                         "--summary", "--upload-retry-max-delay", "0.5", *options, "--", sys.executable,
                         str(FAKE_CAFFE), "train", "--generate", "1000", "--snapshot-dir", str(work / "snap"),
                         "--snapshot-size", str(16 << 10)]


def _store_keys(s3, bucket: str, prefix: str = "p/r1/") -> set[str]:
    """What the bucket holds under the run's keys, asked of moto itself (not through the proxy)."""
    return {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])}


def _unreachable_line(url: str, error: str) -> str:
    return (f"trainvisor: upload destination {url} cannot be reached (cannot write a probe object on {url}: "
            f"{error}): the training starts; its checkpoint sets are journaled and uploaded once it answers\n")


def test_a_destination_down_at_start_holds_back_neither_the_training_nor_the_other(tmp_path, moto_endpoint):
    """S3 refuses every connection before the run starts: one WARNING line, the training runs, the
    file:// store gets all ten sets verified while S3 is still down (not one object there); once
    S3 is back it catches up, and both end verified, each in its own journal."""
    s3 = _bucket(moto_endpoint, "late")
    dest, work = tmp_path / "dest", tmp_path / "w"
    work.mkdir()
    file_url = f"file://{dest}"
    with FaultProxy(moto_endpoint) as proxy:
        proxy.down(3600)
        with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
            proc = subprocess.Popen(_argv(work, "--upload-to", S3_URL, "--upload-to", file_url, "--drain-timeout",
                                          "90"), stdout=out, stderr=err, env={**s3_env(proxy.url, tmp_path), **PLAIN})
        try:
            wait_for(lambda: len(list(dest.rglob("*.manifest.json"))) == len(SETS), 120,
                     "the ten sets in the file:// store")
            assert _store_keys(s3, "late") == set()  # S3 still down: nothing of the run sent, nothing swept or marked
            back = proxy.arrived
            proxy.down(0)
            assert proc.wait(timeout=180) == 0, (tmp_path / "err").read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proxy.arrived > back  # the catching up went through the proxy once it was back
    err = (tmp_path / "err").read_text()
    assert err.count("cannot be reached") == 1 and _unreachable_line(S3_URL, "ConnectionClosedError") in err
    run_dir = work / "run"
    healthy, late = _set_times(run_dir, file_url), _set_times(run_dir, S3_URL)
    assert {name: state for name, (state, _) in healthy.items()} == dict.fromkeys(SETS, "verified")
    assert {name: state for name, (state, _) in late.items()} == dict.fromkeys(SETS, "verified")
    assert max(t for _, t in healthy.values()) < min(t for _, t in late.values())
    assert {f"p/r1/{name}.manifest.json" for name in SETS} <= _store_keys(s3, "late")
    log = (run_dir / "train.log").read_text()
    assert f"upload destination {S3_URL} answers now: its queued checkpoint sets are uploaded" in log
    summary = read_summary(run_dir)
    assert [(d.destination, d.sets_verified, d.sets_pending, d.sets_failed) for d in summary.destinations] == [
        (S3_URL, 10, 0, 0), (file_url, 10, 0, 0)]


def test_a_destination_down_all_run_leaves_its_sets_pending_for_resume(tmp_path, moto_endpoint):
    """The only destination is down from start to end: the run exits with the training's own
    code, its summary says the ten sets are pending (not failed, not verified), nothing reached
    the store; once the store is back `trainvisor resume` uploads all ten."""
    s3, url = _bucket(moto_endpoint, "pending"), "s3://pending/p"
    work = tmp_path / "w"
    work.mkdir()
    with FaultProxy(moto_endpoint) as proxy:
        proxy.down(3600)
        env = {**s3_env(proxy.url, tmp_path), **PLAIN}
        argv = _argv(work, "--upload-to", url, "--drain-timeout", "2")
        proc = subprocess.run(argv + ["--exit-code", "5"], capture_output=True, text=True, timeout=180, env=env)
        assert proc.returncode == 5, proc.stderr[-3000:]
        assert _unreachable_line(url, "ConnectionClosedError") in proc.stderr
        assert f"uploads        {url}: 0 sets verified, 10 pending, 0 failed" in proc.stderr
        run_dir = work / "run"
        summary = json.loads((run_dir / "summary.json").read_text())
        assert (summary["uploads"]["sets_verified"], summary["uploads"]["sets_pending"],
                summary["uploads"]["sets_failed"]) == (0, 10, 0)
        assert _store_keys(s3, "pending") == set()
        proxy.down(0)
        done = subprocess.run(TRAINVISOR + ["resume", str(run_dir), "--drain-timeout", "60"], capture_output=True,
                              text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"uploads to {url}: 10 checkpoint sets verified, 0 pending, 0 failed" in done.stderr
    assert {f"p/r1/{name}.manifest.json" for name in SETS} <= _store_keys(s3, "pending")


def test_a_store_that_refuses_at_start_still_stops_the_run_in_one_line(tmp_path, moto_endpoint):
    """403 AccessDenied on the probe (credentials scoped to another prefix): a configuration error,
    not an outage. One line, exit 3, and the training never started (it would print its log)."""
    _bucket(moto_endpoint, "refusing")
    work = tmp_path / "w"
    work.mkdir()
    with FaultProxy(moto_endpoint) as proxy:
        proxy.scope("refusing", "elsewhere/")
        proc = subprocess.run(_argv(work, "--upload-to", "s3://refusing/p"), capture_output=True, text=True,
                              timeout=120, env={**s3_env(proxy.url, tmp_path), **PLAIN})
    assert (proc.returncode, proc.stderr) == (
        3, "trainvisor: cannot write a probe object on s3://refusing/p: AccessDenied\n")
    assert proc.stdout == "" and not (work / "snap").exists()
