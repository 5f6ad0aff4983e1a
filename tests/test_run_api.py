"""`Run(RunConfig(...)).run()` in Python does what `trainvisor run` does on the command line:
the same metrics, the same uploaded objects, the same summary; no click involved."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainvisor import Run, RunConfig
from trainvisor.config import LoggingConfig, ParsingConfig, ProcessConfig, RunDirConfig, UploadConfig, WatchConfig
from trainvisor.errors import ConfigError
from trainvisor.summary import format_summary

from .conftest import FAKE_CAFFE, s3_env

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
SIZE = 1 << 16


def training(work: Path) -> tuple[str, ...]:
    return (sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--snapshot-dir", str(work / "snap"),
            "--snapshot-size", str(SIZE))


def python_run(work: Path, dest: str) -> tuple:
    """The run through the library: stdout and stderr of the training go to files here."""
    work.mkdir()
    config = RunConfig(
        command=training(work), process=ProcessConfig(cwd=str(work)), parsing=ParsingConfig(year=2026),
        watch=WatchConfig(dirs=(str(work / "snap"),)), upload=UploadConfig(to=dest),
        logging=LoggingConfig(quiet=True, summary=True), run=RunDirConfig(id="r1", dir=str(work / "run")))
    with open(work / "out", "wb") as out, open(work / "err", "wb") as err:
        summary = Run(config, stdout_fd=out.fileno(), stderr_fd=err.fileno()).run()
    return summary, (work / "err").read_bytes()


def cli_run(work: Path, dest: str, env: dict) -> subprocess.CompletedProcess:
    work.mkdir()
    return subprocess.run(
        TRAINVISOR + ["run", "-q", "--summary", "--year", "2026", "--run-id", "r1", "--run-dir", str(work / "run"),
                      "--cwd", str(work), "--watch", str(work / "snap"), "--upload-to", dest, "--", *training(work)],
        capture_output=True, timeout=300, env=env)


def metrics(work: Path) -> list[dict]:
    records = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    for r in records:
        r.pop("wall_time")
    return records


def same_run(tmp_path: Path, py_summary, py_err: bytes, cli: subprocess.CompletedProcess) -> str:
    """Asserts the two runs agree; returns the summary text both printed."""
    assert cli.returncode == 0 == py_summary.exit_code, cli.stderr[-2000:]
    printed = cli.stderr.decode().replace(str(tmp_path / "cli"), str(tmp_path / "py"))  # its own paths differ
    training_err, _, cli_summary = printed.partition("\ntrainvisor summary")
    assert training_err.encode() == py_err  # the training's own bytes, unchanged, in both
    assert metrics(tmp_path / "py") == metrics(tmp_path / "cli")
    records = metrics(tmp_path / "py")
    losses = [r for r in records if r.get("name") == "total_loss"]
    assert len(losses) == 21 and losses[-1]["value"] == 0.0981512 and losses[-1]["iteration"] == 600
    assert sum(r.get("event") == "checkpoint" for r in records) == 20  # 10 sets announced by the log
    text = format_summary(py_summary)
    # The uploads' seconds and rate are measured, so they differ between two runs; the bytes agree.
    assert _timeless("\ntrainvisor summary" + cli_summary) == _timeless(text + "\n")
    assert re.search(r"\n {17}[\d.]+ [KMG]?B sent in [\d.]+ s \([\d.]+ [KMG]?B/s\)\n", text)
    return text


def _timeless(summary: str) -> str:
    return re.sub(r"(B sent) in [\d.]+ s \([^)]*\)", r"\1", summary)


def test_a_python_run_uploads_to_a_local_store_like_the_cli(tmp_path):
    stores = {tag: tmp_path / tag / "store" for tag in ("py", "cli")}
    py_summary, py_err = python_run(tmp_path / "py", f"file://{stores['py']}")
    cli = cli_run(tmp_path / "cli", f"file://{stores['cli']}", dict(os.environ))
    text = same_run(tmp_path, py_summary, py_err, cli)
    assert "checkpoints    10 complete" in text and f"uploads        file://{stores['py']}: 10 sets verified, 0 pending, 0 failed (30 objects verified)" in text
    objects = {tag: {str(p.relative_to(s)): p.read_bytes() for p in sorted(s.rglob("*")) if p.is_file()}
               for tag, s in stores.items()}
    assert objects["py"] == objects["cli"]
    assert len(objects["py"]) == 30  # 10 sets of weights + solverstate + manifest
    assert len(py_summary.uploads.verified) == 30 and py_summary.uploads.complete
    assert py_summary.checkpoints_complete == 10 and py_summary.run_id == "r1"
    assert py_summary.lines == py_err.count(b"\n") and py_summary.fault_total == 0


def test_a_python_run_uploads_to_s3_like_the_cli(tmp_path, moto_endpoint, monkeypatch):
    import boto3

    env = s3_env(moto_endpoint, tmp_path)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
                 "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.setenv(name, env[name])
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    for bucket in ("ckpt-py", "ckpt-cli"):
        s3.create_bucket(Bucket=bucket)
    py_summary, py_err = python_run(tmp_path / "py", "s3://ckpt-py/backups")
    cli = cli_run(tmp_path / "cli", "s3://ckpt-cli/backups", env)
    text = same_run(tmp_path, py_summary, py_err, cli.__class__(cli.args, cli.returncode, cli.stdout,
                                                                 cli.stderr.replace(b"ckpt-cli", b"ckpt-py")))
    assert "uploads        s3://ckpt-py/backups: 10 sets verified, 0 pending, 0 failed (30 objects" in text

    def stored(bucket: str) -> dict[str, bytes]:
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
        return {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in sorted(keys)}

    py_objects, cli_objects = stored("ckpt-py"), stored("ckpt-cli")
    assert len(py_objects) == 30 and py_objects.keys() == cli_objects.keys()
    for key, data in py_objects.items():
        if key.endswith(".manifest.json"):  # manifests name their own paths and times
            assert json.loads(data)["files"][0]["size"] == json.loads(cli_objects[key])["files"][0]["size"]
        else:
            assert data == cli_objects[key] and len(data) == SIZE


def test_a_run_without_a_command_is_a_config_error_before_anything_is_made(tmp_path):
    with pytest.raises(ConfigError, match="command: no command given"):
        Run(RunConfig(run=RunDirConfig(dir=str(tmp_path / "r"))))
    assert not (tmp_path / "r").exists()


def test_the_library_defaults_are_the_cli_defaults():
    cfg = RunConfig()
    assert (cfg.parsing.parser, cfg.process.kill_timeout, cfg.upload.drain_timeout, cfg.watch.settle) == (
        "auto", 30.0, 600.0, 2.0)
    shown = subprocess.run(TRAINVISOR + ["config", "show", "--format", "toml"], capture_output=True, text=True,
                           timeout=60, env={k: v for k, v in os.environ.items() if not k.startswith("TRAINVISOR_")})
    assert shown.returncode == 0, shown.stderr
    import tomllib

    assert RunConfig.from_dict(tomllib.loads(shown.stdout)) == cfg
