"""The CLI's other commands as library calls: `trainvisor.replay`, `parse_tables` and `upload` give
what `trainvisor replay`, `parse` and `upload` give, on fixtures, real logs, a file:// store and a
real (moto) S3 server; a bad URL is the same one-line error either way."""
from __future__ import annotations

import inspect
import io
import json
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

import trainvisor
from trainvisor.config import ParsingConfig
from trainvisor.errors import ConfigError

from .conftest import FIXTURES, real_logs, s3_env

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
LOGS = FIXTURES / "logs"


def cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(TRAINVISOR + list(args), capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def comparable(record: dict) -> dict:
    """A record as both sides must agree on it: everything but when it was read."""
    return {k: v for k, v in record.items() if k != "wall_time"}


def call_records(events) -> list[dict]:
    """The call's events as the command's JSON lines say them (floats through JSON both ways)."""
    return [comparable(json.loads(json.dumps(e.to_json_dict()))) for e in events]


def command_records(path: Path) -> list[dict]:
    return [comparable(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()]


# (log, the call's keywords, the command's flags); real logs are looked up in ../shared/real-logs.
REPLAY_CASES = {
    "caffe-fixture": (LOGS / "lenet-newyear.log", {"year": 2026}, ["--year", "2026"]),
    "ranks-1-and-0": (LOGS / "ranks-torchrun-tee.log", {"ranks": "1,0"}, ["--ranks", "1,0"]),
    "keras-bar": (LOGS / "keras3-bar.log", {"parser": "keras"}, ["--parser", "keras"]),
    "caffe-epochs": ("caffe/bearpaw-fork-mnist.log", {"parser": "caffe", "year": 2026, "iters_per_epoch": 500},
                     ["--parser", "caffe", "--year", "2026", "--iters-per-epoch", "500"]),
    "utf16-keras": ("keras/keras3-utf16le-ansi.log", {}, []),
    "gbk-yolox": ("yolo/yolox-gbk-crlf.log", {"parser": "yolo"}, ["--parser", "yolo"]),
    "lines-cut": ("mxnet/tornadomeet-resnet18-imagenet.log", {"max_line_bytes": 150}, ["--max-line-bytes", "150"]),
    "detectron2": ("detectron2/bupt-d2-faster-c4.log", {"parser": "auto"}, ["--parser", "auto"]),
}


def log_path(log: "Path | str") -> Path:
    if isinstance(log, Path):
        return log
    framework, name = log.split("/")
    return real_logs(framework) / name


@pytest.mark.parametrize("case", list(REPLAY_CASES))
def test_replay_call_gives_the_records_the_replay_command_writes(case, tmp_path):
    log, options, flags = REPLAY_CASES[case]
    path = log_path(log)
    out = tmp_path / "cli.jsonl"
    done = cli("replay", *flags, "--summary", "--metrics", str(out), str(path))
    assert done.returncode == 0, done.stderr
    replayed = trainvisor.replay(path, **options)
    expected = command_records(out)
    assert expected, f"{path.name} yields records"
    assert call_records(replayed.events) == expected
    assert replayed.stats.events == len(expected) and replayed.faults == {}
    cut = f" ({replayed.stats.truncated_lines} cut at the line cap)" if replayed.stats.truncated_lines else ""
    assert f"\n  lines parsed   {replayed.stats.lines}{cut}\n" in done.stderr


def test_replay_call_keeps_the_values_the_log_printed(tmp_path):
    """Values read off the log's own lines: bearpaw-fork-mnist.log line 498 `Test net output #0:
    accuracy = 0.0756` (iteration 0), line 504 `Train net output #0: loss = 0.362464` (iteration
    100 of epochs of 500: epoch 0.2)."""
    path = real_logs("caffe") / "bearpaw-fork-mnist.log"
    metrics = trainvisor.replay(path, parser="caffe", year=2026, iters_per_epoch=500).metrics
    first_test = next(m for m in metrics if m.phase == "test" and m.name == "accuracy")
    assert (first_test.value, first_test.iteration, first_test.line) == (0.0756, 0, 498)
    loss = next(m for m in metrics if m.phase == "train" and m.name == "loss" and m.iteration == 100)
    assert (loss.value, loss.line, loss.epoch) == (0.362464, 504, 0.2)
    cut = trainvisor.replay(real_logs("mxnet") / "tornadomeet-resnet18-imagenet.log", max_line_bytes=150)
    assert cut.stats.truncated_lines == 2  # the log's two lines over 150 bytes


def test_replay_with_rules_and_sinks_like_the_command(tmp_path):
    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - name: batch\n    contains: Speed\n    pattern: 'Batch \\[(?P<batch_no>\\d+)\\]'\n")
    out = tmp_path / "cli.jsonl"
    done = cli("replay", "--rules", str(rules), "--metrics", str(out), str(LOGS / "mxnet.log"))
    assert done.returncode == 0, done.stderr
    written = tmp_path / "call.jsonl"
    replayed = trainvisor.replay(LOGS / "mxnet.log", rules=str(rules), metrics=str(written), keep_events=False)
    assert replayed.events == () and command_records(written) == command_records(out)
    assert [r["value"] for r in command_records(out) if r.get("name") == "batch_no"] == [20.0, 40.0]


def test_a_failing_sink_or_hook_is_counted_never_raised():
    class Broken:
        name = "broken"

        def write(self, events):
            raise RuntimeError("full disk")

        def flush(self):
            pass

        def close(self):
            pass

    def hook(record):
        raise ValueError("bad hook")

    replayed = trainvisor.replay(LOGS / "lenet-newyear.log", year=2026, sinks=[Broken()], hooks=[hook])
    assert set(replayed.faults) == {"sink broken", "hook hook"}
    assert replayed.faults["hook hook"] == replayed.stats.lines == 105  # once a line, every line still read
    assert len(replayed.events) == 99 and replayed.metrics[0].value == 0.1041  # every event still kept


@pytest.mark.parametrize("layout,flags", [("csv", ["--csv", "{out}"]), ("sh", ["--format", "sh", "-o", "{out}"])])
def test_parse_tables_call_writes_the_files_the_parse_command_writes(layout, flags, tmp_path):
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    cli_out, call_out = tmp_path / "cli", tmp_path / "call"
    done = cli("parse", str(log), "--year", "2026", *[f.replace("{out}", str(cli_out)) for f in flags])
    assert done.returncode == 0, done.stderr
    tables = trainvisor.parse_tables(log, call_out, layout=layout, year=2026)
    assert tables.found and [Path(p).name for p in tables.paths] == [f"{log.name}.train", f"{log.name}.test"]
    for path in tables.paths:
        assert Path(path).read_bytes() == (cli_out / Path(path).name).read_bytes()
    if layout == "csv":  # Caffe's parse_log.py answer for the same log, row for row
        reference = (log.parent / f"{log.name}.test.csv").read_text().splitlines()
        assert (call_out / f"{log.name}.test").read_text().splitlines() == reference


def test_the_calls_take_every_parsing_option_the_commands_take():
    """A parsing key added to the config (and so to --flags) must reach the calls too."""
    keys = {f.name for f in fields(ParsingConfig)}
    for call in (trainvisor.replay, trainvisor.parse_tables):
        params = inspect.signature(call).parameters
        assert keys <= set(params), f"{call.__name__} lacks {keys - set(params)}"
        assert all(params[k].default == getattr(ParsingConfig(), k) for k in keys)


def test_trainvisor_replay_is_the_call_even_after_the_engine_module_is_imported():
    # sinks.tables imports the replay engine module (here trainvisor/replay.py, a name the call shares)
    code = ("import trainvisor.sinks.tables, trainvisor; "
            "print(trainvisor.replay.__module__, trainvisor.upload.__module__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["trainvisor.calls.logs", "trainvisor.calls.uploads"]
    bare = subprocess.run([sys.executable, "-c", "import trainvisor, sys; print(sorted(sys.modules))"],
                          capture_output=True, text=True, timeout=60)
    assert "trainvisor.calls" not in bare.stdout and "trainvisor.uploaders" not in bare.stdout  # import stays cheap


def make_tree(root: Path) -> dict[str, bytes]:
    """Three files, one of 3 MiB (several chunks), in a directory and beside it."""
    (root / "src" / "sub").mkdir(parents=True)
    files = {"a.bin": os.urandom(3 << 20), "sub/b.txt": b"hello", "single.pt": b"weights"}
    for rel, data in files.items():
        (root / ("src" if rel != "single.pt" else "") / rel).write_bytes(data)
    return files


def upload_args(root: Path) -> list[str]:
    return [str(root / "src"), str(root / "single.pt")]


def test_upload_call_to_a_file_store_equals_the_command_and_a_second_call_sends_nothing(tmp_path):
    files = make_tree(tmp_path)
    done = cli("upload", *upload_args(tmp_path), "--to", f"file://{tmp_path}/cli-store", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = io.StringIO()
    first = trainvisor.upload(upload_args(tmp_path), to=f"file://{tmp_path}/call-store", run_dir=tmp_path / "rd",
                              progress=shown)
    assert (first.files_sent, first.bytes_sent, first.files_skipped, first.failed, first.ok) == (
        3, sum(map(len, files.values())), 0, (), True)
    assert shown.getvalue().endswith("  done  3/3 files\n")  # what --progress draws, on the stream given
    assert sorted(first.verified) == ["a.bin", "single.pt", "sub/b.txt"]
    assert "uploaded 3 file(s), 3.1 MB, in " in done.stderr
    for rel, data in files.items():
        assert (tmp_path / "call-store" / rel).read_bytes() == data == (tmp_path / "cli-store" / rel).read_bytes()
    again = trainvisor.upload(upload_args(tmp_path), to=f"file://{tmp_path}/call-store", run_dir=tmp_path / "rd")
    assert (again.files_sent, again.bytes_sent, again.files_skipped, again.bytes_skipped) == (
        0, 0, 3, first.bytes_sent)
    assert sorted(again.verified) == sorted(first.verified) and again.run_dir == str(tmp_path / "rd")
    nightly = trainvisor.upload(tmp_path / "single.pt", to=f"file://{tmp_path}/call-store", prefix="/nightly/",
                                run_dir=tmp_path / "rd")
    assert nightly.verified == ("nightly/single.pt",) and nightly.files_sent == 1
    assert (tmp_path / "call-store" / "nightly" / "single.pt").read_bytes() == b"weights"


def test_upload_call_to_s3_equals_the_command_and_a_second_call_sends_nothing(tmp_path, moto_endpoint, monkeypatch):
    import boto3

    env = s3_env(moto_endpoint, tmp_path)
    for name, value in env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="ckpt")
    files = make_tree(tmp_path)
    done = cli("upload", *upload_args(tmp_path), "--to", "s3://ckpt/cli", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    first = trainvisor.upload(upload_args(tmp_path), to="s3://ckpt/call/", run_dir=tmp_path / "rd", concurrency=3)
    assert (first.files_sent, first.bytes_sent, first.destination) == (3, sum(map(len, files.values())),
                                                                       "s3://ckpt/call/")
    assert sorted(first.verified) == ["call/a.bin", "call/single.pt", "call/sub/b.txt"]

    def stored(prefix: str) -> dict[str, tuple[int, str]]:
        objects = s3.list_objects_v2(Bucket="ckpt", Prefix=prefix + "/")["Contents"]
        return {o["Key"][len(prefix) + 1:]: (o["Size"], o["ETag"]) for o in objects}

    assert stored("call") == stored("cli") and set(stored("call")) == set(files)
    again = trainvisor.upload(upload_args(tmp_path), to="s3://ckpt/call", run_dir=tmp_path / "rd")
    assert (again.files_sent, again.files_skipped, again.failed) == (0, 3, ())


BAD_URLS = {  # the URL: the error both sides give (the command: after "trainvisor: ")
    "s3:///backups": "S3 URL must look like s3://bucket/prefix, got 's3:///backups'",
    "kodo://bucket/p?zone=z2": "unknown Kodo URL option(s) zone in 'kodo://bucket/p?zone=z2' "
                               "(known: up_host, rs_host, region)",
    "file://host/backups": "file URL must look like file:///absolute/path, got 'file://host/backups'",
    "ftp://host/backups": "unsupported upload destination 'ftp://host/backups' (known: file://, kodo://, s3://)",
    "s3://AKIA:hunter2@ckpt/p": "S3 URL takes no user or password (credentials come from the environment or a "
                                "credentials file), got 's3://AKIA:***@ckpt/p'",
}


@pytest.mark.parametrize("url", list(BAD_URLS))
def test_a_bad_url_is_the_same_one_line_error_from_the_call_and_the_command(url, tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError) as info:
        trainvisor.upload(tmp_path / "f", to=url, run_dir=tmp_path / "rd")
    assert str(info.value) == BAD_URLS[url]
    done = cli("upload", str(tmp_path / "f"), "--to", url, "--run-dir", str(tmp_path / "rd-cli"), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, f"trainvisor: {BAD_URLS[url]}\n")
    assert "hunter2" not in done.stderr


def test_no_url_at_all_names_where_it_was_written(tmp_path):
    (tmp_path / "f").write_text("x")
    example = "needs a URL such as file:///backups or s3://bucket/prefix, got 'backups'"
    with pytest.raises(ConfigError, match=rf"^upload\(to=\.\.\.\) {example}$"):
        trainvisor.upload([tmp_path / "f"], to="backups")
    done = cli("upload", str(tmp_path / "f"), "--to", "backups", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, f"trainvisor: --to {example}\n")
    assert not (tmp_path / "trainvisor-runs").exists()  # refused before anything was made


@pytest.mark.parametrize("option,value,problem", [
    ("concurrency", 0, "upload(concurrency=...) must be a whole number from 1 to 64, got 0"),
    ("concurrency", "4", "upload(concurrency=...) must be a whole number from 1 to 64, got '4'"),
    ("retries", -1, "upload(retries=...) must be a whole number, 0 or more, got -1"),
])
def test_a_bad_upload_option_is_one_line_before_anything_is_made(option, value, problem, tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError) as info:
        trainvisor.upload(tmp_path / "f", to=f"file://{tmp_path}/store", run_dir=tmp_path / "rd", **{option: value})
    assert str(info.value) == problem and not (tmp_path / "rd").exists()


@pytest.mark.parametrize("url,location,path,prefix,options", [
    ("file:///backups/ckpt", "", "/backups/ckpt", "", {}),       # the path is where the store is
    ("file://localhost/backups", "localhost", "/backups", "", {}),
    ("s3://ckpt/team/run-7/", "ckpt", "/team/run-7/", "team/run-7", {}),
    ("s3://ckpt", "ckpt", "", "", {}),
    ("kodo://ckpt/p?region=z2&up_host=http://127.0.0.1:9", "ckpt", "/p", "p",
     {"region": "z2", "up_host": "http://127.0.0.1:9"}),
])
def test_one_reading_of_a_destination_url(url, location, path, prefix, options):
    from trainvisor.uploaders.destinations import key_prefix, parse_destination

    dest = parse_destination(url)
    assert (dest.location, dest.path, dest.prefix, dict(dest.options)) == (location, path, prefix, options)
    assert key_prefix(url) == prefix  # what a run's keys start with, from an opened uploader's url
