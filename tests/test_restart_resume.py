"""Restart and resume (issue 21): a fake Caffe that crashes after its third snapshot is started
again with `-snapshot` pointing at that snapshot's solver state: the local copy when it is whole,
else the one downloaded from the moto S3 server and verified against its manifest first; a
corrupted remote copy is refused in one line and not used. One run holds both attempts' metrics,
each record with its attempt number. A fresh machine resumes from the store (`resume_from`). A
training stopped on purpose is never restarted."""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from trainvisor import Run, RunConfig
from trainvisor.config import LoggingConfig, ProcessConfig, RunDirConfig, UploadConfig, WatchConfig
from trainvisor.config.schema import RestartConfig
from trainvisor.errors import ConfigError
from trainvisor.run.restart import backoff_delay, run_restarting
from trainvisor.run.resumepoint import ResumePoint, check_template, local_difference, local_sets, resume_args
from trainvisor.run.summaryfile import read_summary

from .conftest import FAKE_CAFFE, s3_env

SOLVER = 'snapshot_prefix: "snaps/lenet"\n'
RESUME = "-snapshot {latest.solverstate}"
STATE_300 = "lenet_iter_300.solverstate"


def _fake(*extra: str) -> tuple[str, ...]:
    """A 1000-iteration LeNet log (a snapshot every 100) that crashes after its third snapshot."""
    return (sys.executable, str(FAKE_CAFFE), "train", "-solver", "solver.prototxt", "--generate", "1000",
            "--crash-after-snapshots", "3", *extra)


def _config(work: Path, *, run_dir: str = "run", upload: str | None = None, resume_from: str | None = None,
            max_restarts: int = 1) -> RunConfig:
    work.mkdir(parents=True, exist_ok=True)
    (work / "solver.prototxt").write_text(SOLVER)
    return RunConfig(command=_fake(), process=ProcessConfig(cwd=str(work), kill_timeout=10),
                     watch=WatchConfig(dirs=(str(work / "snaps"),)), upload=UploadConfig(to=upload),
                     logging=LoggingConfig(quiet=True), run=RunDirConfig(id="r1", dir=str(work / run_dir)),
                     restart=RestartConfig(policy="on-failure", max_restarts=max_restarts, backoff=5.0,
                                           resume_arg=RESUME, resume_from=resume_from))


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _train_loss_at(iteration: int) -> float:
    """The loss the generated log prints at `iteration` (the fake plays exactly this log)."""
    from fixtures.caffe_log import generate_caffe_log

    pattern = re.compile(rf"\] Iteration {iteration} \(.*\), loss = (\S+)")
    text = "".join(generate_caffe_log(max_iter=1000, display=50, test_interval=250, snapshot=100,
                                      snapshot_prefix="snaps/lenet"))
    return float(pattern.search(text).group(1))


class Store:
    """A bucket of its own on the moto S3 server (moto keeps buckets across its servers in one
    process: a shared name would show one test the sets of another)."""

    def __init__(self, client, bucket: str) -> None:
        self.client, self.bucket, self.url = client, bucket, f"s3://{bucket}/backups"

    def read(self, key: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()


@pytest.fixture
def s3(moto_endpoint, tmp_path, monkeypatch) -> Store:
    """A new bucket on the moto S3 server; this process's environment pointing at it."""
    import hashlib

    import boto3

    env = s3_env(moto_endpoint, tmp_path)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
                 "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_EC2_METADATA_DISABLED"):
        monkeypatch.setenv(name, env[name])
    client = boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="test",
                          aws_secret_access_key="test", region_name="us-east-1")
    bucket = "restart-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]
    client.create_bucket(Bucket=bucket)
    return Store(client, bucket)


def _restarting(config: RunConfig, during_backoff) -> tuple[Run, list[float]]:
    """The run under its restart policy; the back-off is `during_backoff(run)` (no time passes),
    its delays recorded."""
    delays: list[float] = []
    run = Run(config, stdout_fd=None, stderr_fd=None)
    with run:
        def backoff(seconds: float) -> None:
            delays.append(seconds)
            during_backoff(run)
        run_restarting(run, sleep=backoff)
    return run, delays


def _lose_local_set(run: Run, work: Path, name: str) -> None:
    """The uploads of the crashed attempt finish, then the machine loses that set's files."""
    run.settle_checkpoints(uploads=True)
    for f in (work / "snaps").glob(f"{name}.*"):
        f.unlink()


def test_a_crash_resumes_from_the_stores_verified_copy_when_the_local_one_is_gone(s3, tmp_path):
    work = tmp_path / "w"
    run, delays = _restarting(_config(work, upload=s3.url),
                              lambda r: _lose_local_set(r, work, "lenet_iter_300"))
    s = run.summary
    assert (s.exit_code, s.attempts, delays) == (0, 2, [5.0])
    resumed = work / "run" / "resumed" / "lenet_iter_300" / STATE_300
    assert s.restarts == (f"attempt 1 exit code 1; restarted with -snapshot {resumed}",)
    # Downloaded byte for byte from the store, the local original being gone.
    assert resumed.read_bytes() == s3.read(f"backups/r1/{STATE_300}")
    assert not (work / "snaps" / STATE_300).exists()
    records = _records(work / "run")
    first = [r for r in records if r["attempt"] == 1 and "name" in r]
    second = [r for r in records if r["attempt"] == 2 and "name" in r]
    assert {r["attempt"] for r in records} == {1, 2}
    assert [r["iteration"] for r in records if r.get("kind") == "solverstate"] == [100, 200, 300, 400, 500, 600, 700,
                                                                                  800, 900, 1000]
    assert [r["attempt"] for r in records if r.get("kind") == "solverstate"] == [1, 1, 1] + [2] * 7
    # Attempt 1 crashed after snapshot 300, before displaying iteration 300; attempt 2 goes on from there.
    assert max(r["iteration"] for r in first) == 250
    assert min(r["iteration"] for r in second) == 300
    assert max(r["iteration"] for r in second) == 1000
    loss_300 = [r["value"] for r in second if (r["name"], r["phase"], r["iteration"]) == ("loss", "train", 300)]
    assert loss_300 == [_train_loss_at(300)]
    assert read_summary(work / "run").restarts == s.restarts  # kept in summary.json
    assert json.loads((work / "run" / "run.json").read_text())["attempt"] == 2


def test_a_corrupted_remote_copy_is_refused_and_an_older_whole_local_set_is_used(s3, tmp_path):
    work = tmp_path / "w"

    def lose_and_corrupt(run: Run) -> None:
        _lose_local_set(run, work, "lenet_iter_300")
        key = f"backups/r1/{STATE_300}"
        data = bytearray(s3.read(key))
        data[0] ^= 0x01
        s3.client.put_object(Bucket=s3.bucket, Key=key, Body=bytes(data))

    run, _ = _restarting(_config(work, upload=s3.url), lose_and_corrupt)
    s = run.summary
    older = work / "snaps" / "lenet_iter_200.solverstate"
    # From 200 the fake reaches its fault at 300 again; no restart is left (max_restarts 1).
    assert (s.exit_code, s.attempts) == (1, 2)
    assert s.restarts == (f"attempt 1 exit code 1; restarted with -snapshot {older}",)
    assert not (work / "run" / "resumed" / "lenet_iter_300").exists()  # nothing of it moved into place
    said = (work / "run" / "train.log").read_text()
    refused = [line for line in said.splitlines() if "refused" in line]
    assert len(refused) == 1 and f"the store's newest checkpoint was refused, not used ({s3.url}/r1): " \
        f"set lenet_iter_300 refused" in refused[0] and f"{STATE_300}: checksum crc32c:" in refused[0]
    second = [r for r in _records(work / "run") if r["attempt"] == 2 and "name" in r]
    assert (min(r["iteration"] for r in second), max(r["iteration"] for r in second)) == (200, 250)


def test_a_fresh_machine_resumes_from_the_store(s3, tmp_path):
    """A first run uploads and crashes with no restarts left; a second run, elsewhere, starts
    from the store's newest set (`resume_from`) in its very first attempt."""
    first, _ = _restarting(_config(tmp_path / "a", upload=s3.url, max_restarts=0), lambda r: None)
    assert (first.summary.exit_code, first.summary.attempts) == (1, 1)
    first_run = tmp_path / "a" / "run"
    assert [s.name for s in local_sets(first_run)][:1] == ["lenet_iter_300"]

    work = tmp_path / "b"
    fresh, delays = _restarting(_config(work, resume_from=s3.url), lambda r: None)
    s = fresh.summary
    assert (s.exit_code, s.attempts, s.restarts, delays) == (0, 1, (), [])
    records = _records(work / "run")
    assert {r["attempt"] for r in records} == {1}
    assert min(r["iteration"] for r in records if "name" in r) == 300
    said = (work / "run" / "train.log").read_text()
    assert f"resuming from lenet_iter_300 downloaded from {s3.url} (verified against its manifest)" in said
    resumed = work / "run" / "resumed" / "lenet_iter_300"
    assert sorted(p.name for p in resumed.iterdir()) == ["lenet_iter_300.caffemodel", STATE_300]
    assert (resumed / STATE_300).read_bytes() == (tmp_path / "a" / "snaps" / STATE_300).read_bytes()


def test_a_store_url_with_a_password_is_refused_before_the_training_starts(tmp_path):
    config = _config(tmp_path, resume_from="s3://AKIA:secret@ckpt/backups")
    with pytest.raises(ConfigError) as err:
        Run(config, stdout_fd=None, stderr_fd=None).run()
    assert str(err.value).startswith("S3 URL takes no user or password") and "secret" not in str(err.value)
    assert "\n" not in str(err.value) and (tmp_path / "run" / "metrics.jsonl").read_text() == ""  # nothing ran
    no_template = replace(config, restart=replace(config.restart, resume_from="s3://ckpt/backups", resume_arg=None))
    with pytest.raises(ConfigError, match=r"^restart.resume_from needs restart.resume_arg \(--resume-arg TEMPLATE\)"):
        Run(no_template, stdout_fd=None, stderr_fd=None).run()


def test_the_cli_restarts_from_the_local_copy_and_never_restarts_a_stopped_training(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "solver.prototxt").write_text(SOLVER)
    base = [sys.executable, "-m", "trainvisor", "run", "--watch", "snaps", "--restart", "on-failure",
            "--restart-backoff", "0", "--resume-arg", RESUME, "-q"]
    done = subprocess.run(base + ["--run-dir", "crashed", "--", *_fake()], capture_output=True, cwd=work, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    s = read_summary(work / "crashed")
    assert s.attempts == 2
    assert s.restarts == (f"attempt 1 exit code 1; restarted with -snapshot {work / 'snaps' / STATE_300}",)
    assert b"caffe.cpp:251] Resuming from " + str(work / "snaps" / STATE_300).encode() in done.stderr

    # A stop rule ends the training on purpose (SIGINT: the fake dies of it, a second after it began;
    # left alone it would go on for two more and fail): no restart.
    failing = (sys.executable, str(FAKE_CAFFE), "train", "-solver", "solver.prototxt", "--generate", "1000",
               "--exit-code", "1", "--nan-at", "150", "--rate", "100")
    stopped = subprocess.run(base + ["--run-dir", "stopped", "--stop-when", "loss is nan", "--", *failing],
                             capture_output=True, cwd=work, timeout=300)
    assert stopped.returncode == 4, stopped.stderr[-2000:]
    s = read_summary(work / "stopped")
    assert (s.attempts, s.restarts) == (1, ())
    assert s.stop_reason is not None and "loss is nan" in s.stop_reason


def test_backoff_doubles_up_to_ten_minutes():
    assert [backoff_delay(10.0, n) for n in (1, 2, 3, 4)] == [10.0, 20.0, 40.0, 80.0]
    assert backoff_delay(10.0, 12) == 600.0
    assert backoff_delay(0.0, 3) == 0.0


def test_resume_arg_fills_the_sets_files_and_rejects_unknown_fields():
    point = ResumePoint("lenet_iter_300", 300, None, ("/c/lenet_iter_300.caffemodel", "/c/lenet_iter_300.solverstate"))
    assert resume_args("-snapshot {latest.solverstate}", point) == ["-snapshot", "/c/lenet_iter_300.solverstate"]
    assert resume_args("--resume={latest} --dir '{latest_dir}'", point) == [
        "--resume=/c/lenet_iter_300.caffemodel", "--dir", "/c"]
    with pytest.raises(ConfigError, match=r"has no file ending in \.ckpt \(its files: lenet_iter_300.caffemodel, "):
        resume_args("--ckpt {latest.ckpt}", point)
    with pytest.raises(ConfigError, match=r"unknown field \{newest\}"):
        check_template("--resume {newest}")
    with pytest.raises(ConfigError) as err:  # where it is written: the config names the key
        RunConfig.from_dict({"restart": {"resume_arg": "--resume {newest}"}})
    assert str(err.value) == ("restart.resume_arg: has an unknown field {newest} (use {latest}, {latest.EXT} or "
                              "{latest_dir}) (got '--resume {newest}')")


def test_a_local_file_that_differs_from_its_manifest_is_not_resumed_from(tmp_path):
    from trainvisor.checkpoints import Manifest, ManifestEntry
    from trainvisor.uploaders.local import file_sha256

    snap = tmp_path / "lenet_iter_300.solverstate"
    snap.write_bytes(b"state" * 100)
    (tmp_path / "checkpoints.jsonl").write_text(json.dumps({
        "event": "checkpoint_complete", "name": "lenet_iter_300", "iteration": 300, "epoch": None,
        "root": str(tmp_path), "files": [{"path": str(snap), "relpath": snap.name, "size": 500}]}) + "\n")
    manifest = Manifest("r1", "lenet_iter_300", 300, None, "caffe",
                        (ManifestEntry(snap.name, "k", 500, f"sha256:{file_sha256(snap)}"),))
    (tmp_path / ".lenet_iter_300.manifest.json").write_text(manifest.to_json())
    (cp,) = local_sets(tmp_path)
    assert local_difference(tmp_path, cp) is None
    snap.write_bytes(b"State" * 100)  # same size, other bytes
    assert local_difference(tmp_path, cp) == f"{snap} does not match its manifest's checksum {manifest.files[0].checksum}"
    snap.unlink()
    assert local_difference(tmp_path, cp) == f"{snap} is gone"


def test_a_stop_asked_for_during_the_backoff_ends_the_run_without_a_restart(tmp_path):
    work = tmp_path / "w"
    run, delays = _restarting(_config(work), lambda r: r.request_stop("shutting down"))
    s = run.summary
    assert (s.attempts, s.restarts, s.exit_code, delays) == (1, (), 1, [5.0])
    assert "a stop was asked for during the back-off: not restarted" in (work / "run" / "train.log").read_text()


def test_what_counts_as_a_crash():
    """The rule, per way a child ends: only a failure nobody asked for is restarted."""
    from trainvisor.run.restart import crash_of
    from trainvisor.supervisor.supervisor import ProcessResult

    assert crash_of(ProcessResult(exit_code=1, returncode=1)) == "exit code 1"
    assert crash_of(ProcessResult(exit_code=139, returncode=-11)) == "killed by signal 11"
    assert crash_of(ProcessResult(exit_code=0, returncode=0)) is None
    # A Ctrl-C or a platform's SIGTERM that trainvisor forwarded; a stop it asked for itself.
    assert crash_of(ProcessResult(exit_code=130, returncode=-2, signalled_by=2)) is None
    assert crash_of(ProcessResult(exit_code=1, returncode=1, stop_reason="loss is nan")) is None


def test_a_store_with_no_complete_set_is_said_and_the_training_starts_from_the_beginning(s3, tmp_path):
    work = tmp_path / "w"
    run, _ = _restarting(_config(work, resume_from=f"{s3.url}/empty", max_restarts=0), lambda r: None)
    assert (run.summary.exit_code, run.summary.attempts) == (1, 1)  # crashed at its fault, as a first run does
    said = [line.split(" trainvisor: ", 1)[1] for line in (work / "run" / "train.log").read_text().splitlines()
            if "resume" in line and " WARNING " in line]
    assert said[0].startswith(f"no checkpoint to resume from in {s3.url}/empty: ")
    assert said[1] == "no complete checkpoint to resume from: the training starts from the beginning"
    records = _records(work / "run")
    assert min(r["iteration"] for r in records if "name" in r) == 0


def test_the_runs_own_folder_in_its_destination():
    """What a restart reads back: upload.to down to the folder the run's keys are in."""
    from trainvisor.run.resumepoint import folder_url

    assert folder_url("s3://ckpt/backups", "backups/r1/lenet_iter_300.solverstate") == "s3://ckpt/backups/r1"
    assert folder_url("kodo://ckpt/b?region=z2", "b/r1/x.pth") == "kodo://ckpt/b/r1?region=z2"
    assert folder_url("file:///srv/store", "r1/x.pth") == "file:///srv/store/r1"
    assert folder_url("s3://ckpt/backups", "other/r1/x.pth") == "s3://ckpt/backups"  # a template elsewhere
    assert folder_url("s3://ckpt/backups", "backups-old/r1/x.pth") == "s3://ckpt/backups"


def test_under_a_shell_a_checkpoint_path_with_a_space_stays_one_word(tmp_path):
    work = tmp_path / "with space"
    config = _config(work, max_restarts=1)
    line = " ".join(shlex.quote(w) for w in _fake())
    config = replace(config, command=(line,), process=replace(config.process, shell=True))
    run, _ = _restarting(config, lambda r: None)
    state = work / "snaps" / STATE_300
    assert (run.summary.exit_code, run.summary.attempts) == (0, 2)  # the fake found its -snapshot file
    assert run.summary.restarts == (f"attempt 1 exit code 1; restarted with -snapshot {shlex.quote(str(state))}",)
