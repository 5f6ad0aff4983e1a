"""Issue 23: no error path prints a password. Each test runs the real `trainvisor` with a URL (or a
key) carrying a distinctive password and reads everything the run leaves for a person: stdout,
stderr and every file of its directory (train.log, summary.json, config.yaml...). The message must
still name what was wrong: the user, the host, the bucket."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from .conftest import KODO_AK
from .http_servers import TrackingServer

PW = "PW-s3cr3t-XYZ"
TRAINVISOR = [sys.executable, "-m", "trainvisor"]
TRAINING = [sys.executable, "-c", "import sys; [print(f'I0101 00:00:0{i}.000001  1 solver.cpp:218] Iteration "
            "{i}0 (1 iter/s, 1s/10 iters), loss = 0.{i}', file=sys.stderr) for i in (1, 2, 3)]"]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No store, tracking server or proxy of the machine's; nothing that changes what is printed."""
    (tmp_path / "aws-none").write_text("")
    drop = ("AWS_", "QINIU_", "MLFLOW_", "TRAINVISOR_", "COLUMNS", "LINES", "TERM", "NO_COLOR", "FORCE_COLOR", "LC_",
            "LANGUAGE", "PYTHONIOENCODING", "TZ")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and "proxy" not in k.lower()}
    return {**env, "TRAINVISOR_OFFLINE": "1", "AWS_EC2_METADATA_DISABLED": "true", "LANG": "C.UTF-8",
            "AWS_CONFIG_FILE": str(tmp_path / "aws-none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-none"),
            "AWS_DEFAULT_REGION": "us-east-1", **extra}


def _trainvisor(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(TRAINVISOR + args, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def _assert_masked(proc: subprocess.CompletedProcess, *dirs: Path) -> None:
    """The password in none of stdout, stderr, nor any file the run wrote; no traceback printed."""
    assert PW not in proc.stdout and PW not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    for d in dirs:
        for f in d.rglob("*"):
            assert not f.is_file() or PW.encode() not in f.read_bytes(), f


def _closed_port() -> int:
    with socket.socket() as s:  # a loopback port nobody listens on once this block ends
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("args, said", [
    (["run", "--run-dir", "rd", "--upload-to", f"s3://AKIAUSER:{PW}@bkt/pw", "--", "true"],
     "S3 URL takes no user or password (credentials come from the environment or a credentials file), "
     "got 's3://AKIAUSER:***@bkt/pw'"),
    # an AWS secret key holds '/': the URL's host part ends early, and the URL was taken as a bucket
    (["run", "--run-dir", "rd", "--upload-to", f"s3://AKIAUSER:{PW}/a+b@bkt/pw", "--", "true"],
     "S3 URL takes no user or password (credentials come from the environment or a credentials file), "
     "got 's3://AKIAUSER:***@bkt/pw'"),
    (["run", "--run-dir", "rd", "--upload-to", f"file://user:{PW}@/store", "--", "true"],
     "file URL must look like file:///absolute/path, got 'file://user:***@/store'"),
    (["upload", "x.bin", "--run-dir", "rd", "--to", f"kodo://ak:{PW}@bucket"],
     "Kodo URL takes no user or password (credentials come from the environment or a credentials file), "
     "got 'kodo://ak:***@bucket'"),
    (["run", "--run-dir", "rd", "--upload-to", f"ftp://u:{PW}@host/x", "--", "true"],
     "unsupported upload destination 'ftp://u:***@host/x' (known: file://, kodo://, s3://)"),
    (["download", f"s3://[AKIA:{PW}@bkt", "-o", "out"], "URL: Invalid IPv6 URL, in 's3://[AKIA:***@bkt'"),
    # click's own bad-parameter message quotes the value back
    (["run", "--kill-timeout", f"http://u:{PW}@h", "--", "true"],
     "Invalid value for '--kill-timeout': 'http://u:***@h' is not a valid float."),
    (["run", "--run-dir", "rd", "--callback", f"http://u:{PW}@h:Cls", "--", "true"],
     "callbacks.use: http has no //u:***@h:Cls (for http://u:***@h:Cls)"),
])
def test_a_url_written_with_a_password_is_refused_naming_user_and_host_only(args, said, tmp_path):
    (tmp_path / "x.bin").write_bytes(b"x")
    proc = _trainvisor(args, tmp_path, _env(tmp_path))
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    _assert_masked(proc, tmp_path)


def test_an_unreachable_s3_endpoint_is_named_without_its_password_by_run_resume_and_upload(tmp_path):
    """botocore's EndpointConnectionError quotes the endpoint URL, user and password included. A
    run goes on without the store (an outage must not hold the training: its warning names it);
    resume and upload, which have nothing to do but upload, stop with the error."""
    port = _closed_port()
    env = _env(tmp_path, AWS_ENDPOINT_URL=f"http://eu:{PW}@127.0.0.1:{port}", AWS_ACCESS_KEY_ID="AKIAEU",
               AWS_SECRET_ACCESS_KEY=PW + "-sk")
    said = f"cannot write a probe object on s3://bkt/pw: EndpointConnectionError at http://eu:***@127.0.0.1:{port}"
    run = _trainvisor(["run", "--run-dir", "rd", "--upload-to", "s3://bkt/pw", "--", "true"], tmp_path, env)
    assert run.returncode == 0 and run.stderr.startswith(
        f"trainvisor: upload destination s3://bkt/pw cannot be reached ({said}): the training starts;"), run.stderr
    resume = _trainvisor(["resume", "rd"], tmp_path, env)  # the run directory the refused run left
    assert resume.returncode == 3 and resume.stderr == f"trainvisor: {said}\n"
    assert "s3://bkt/pw" in (tmp_path / "rd" / "config.yaml").read_text()
    (tmp_path / "x.bin").write_bytes(b"x")
    upload = _trainvisor(["upload", "x.bin", "--to", "s3://bkt/pw", "--run-dir", "up", "--retries", "0"], tmp_path, env)
    assert upload.returncode == 3 and upload.stderr == f"trainvisor: {said}\n"
    for proc in (run, resume, upload):
        _assert_masked(proc, tmp_path)


def test_download_from_a_store_behind_a_password_that_does_not_hold_the_run(tmp_path, moto_module_endpoint):
    """The endpoint's password (a proxy in front of an S3-compatible store) and the secret key come
    from a credentials file: the store answers, the set is not there, and neither is shown."""
    import boto3

    boto3.client("s3", endpoint_url=moto_module_endpoint, aws_access_key_id="AKIADL", aws_secret_access_key="x",
                 region_name="us-east-1").create_bucket(Bucket="dl-secrets")
    host = moto_module_endpoint.removeprefix("http://")
    creds = tmp_path / "creds" / "store.env"
    creds.parent.mkdir()
    creds.write_text(f"AWS_ENDPOINT_URL=http://proxy:{PW}@{host}\nAWS_ACCESS_KEY_ID=AKIADL\n"
                     f"AWS_SECRET_ACCESS_KEY={PW}-sk\n")
    work = tmp_path / "work"
    work.mkdir()
    proc = _trainvisor(["download", "s3://dl-secrets/no-such-run", "-o", "out", "--credentials", str(creds)],
                       work, _env(tmp_path))
    assert proc.returncode == 3
    assert proc.stderr == "trainvisor: no checkpoint set under s3://dl-secrets/no-such-run (no *.manifest.json found)\n"
    _assert_masked(proc, work)


def test_a_kodo_store_that_refuses_the_key_is_named_without_host_password_or_key(tmp_path, kodo):
    """A wrong secret key (the test server answers 401), hosts written with a user and password."""
    host = kodo.url.removeprefix("http://")
    url = f"kodo://ckpt/team?up_host=http://up:{PW}@{host}&rs_host=http://rs:{PW}@{host}"
    env = _env(tmp_path, QINIU_ACCESS_KEY=KODO_AK, QINIU_SECRET_KEY=PW + "-wrong-sk")
    proc = _trainvisor(["run", "--run-dir", "rd", "--upload-to", url, "--", "true"], tmp_path, env)
    assert proc.returncode == 3
    assert proc.stderr == ("trainvisor: cannot write a probe object on kodo://ckpt/team: bad credentials "
                           "(QINIU_ACCESS_KEY / QINIU_SECRET_KEY) (HTTP 401)\n")
    config = (tmp_path / "rd" / "config.yaml").read_text()
    assert f"up_host=http://up:***@{host}&rs_host=http://rs:***@{host}" in config
    _assert_masked(proc, tmp_path)


class _Refusing(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_receiver():
    """A webhook receiver that answers every POST with HTTP 500; its port."""
    server = TrackingServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="test-refusing")
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        server.close_connections()
        thread.join(10)


@pytest.mark.parametrize("answer", ["HTTP 500 Internal Server Error", "no answer (URLError: [Errno 111] Connection refused)"])
def test_a_webhook_with_a_password_and_a_token_that_fails_is_named_masked(answer, tmp_path, request):
    port = request.getfixturevalue("refusing_receiver") if answer.startswith("HTTP") else _closed_port()
    url = f"http://hook:{PW}@127.0.0.1:{port}/ingest?team=ml&token={PW}-tk"
    env = _env(tmp_path, TRAINVISOR__SINKS__CLOSE_TIMEOUT="1")
    proc = _trainvisor(["run", "--run-dir", "rd", "--summary", "--webhook", url, "--", *TRAINING], tmp_path, env)
    assert proc.returncode == 0
    shown = f"webhook http://hook:***@127.0.0.1:{port}/ingest?team=ml&token=*** "
    assert f"trainvisor: {shown}{answer}; records held, next attempt in 1s\n" in proc.stderr
    assert f"{shown}{answer}" in (tmp_path / "rd" / "train.log").read_text()
    summary = json.loads((tmp_path / "rd" / "summary.json").read_text())
    assert [(s["name"], s["written"]) for s in summary["sinks"]] == [("jsonl", 6), ("webhook", 0)]
    _assert_masked(proc, tmp_path)


def test_an_mlflow_tracking_uri_with_a_password_is_named_masked_when_unreachable(tmp_path):
    pytest.importorskip("mlflow")
    port = _closed_port()
    env = _env(tmp_path, MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="5",
               MLFLOW_TRACKING_PASSWORD=PW + "-env")
    uri = f"http://ml:{PW}@127.0.0.1:{port}"
    proc = _trainvisor(["run", "--run-dir", "rd", "--mlflow", uri, "--", *TRAINING], tmp_path, env)
    assert proc.returncode == 0
    failed = (f"trainvisor: sink mlflow failed: MlflowException: API request to http://ml:***@127.0.0.1:{port}"
              f"/api/2.0/mlflow/experiments/get-by-name failed with exception")
    assert failed in proc.stderr and proc.stderr.rstrip().endswith("(traceback in the run log)")
    log = (tmp_path / "rd" / "train.log").read_text()
    assert "Traceback (most recent call last)" in log and f"http://ml:***@127.0.0.1:{port}" in log
    assert f'mlflow: {{"tracking_uri": "http://ml:***@127.0.0.1:{port}"}}' in (tmp_path / "rd" / "config.yaml").read_text()
    _assert_masked(proc, tmp_path)


def test_a_callback_that_fails_quoting_a_url_is_reported_masked(tmp_path):
    (tmp_path / "leaky_callback.py").write_text(
        "class Leaky:\n"
        "    def on_train_begin(self, **kw):\n"
        f"        raise RuntimeError('cannot reach http://cb:{PW}@127.0.0.1:9/hook')\n")
    # no bytecode: the compiled callback holds the password as its own source does (the user's file)
    env = _env(tmp_path, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
               PYTHONDONTWRITEBYTECODE="1")
    proc = _trainvisor(["run", "--run-dir", "rd", "--callback", "leaky_callback:Leaky", "--", *TRAINING], tmp_path, env)
    assert proc.returncode == 0
    assert ("trainvisor: callback leaky_callback:Leaky.on_train_begin failed: RuntimeError: cannot reach "
            "http://cb:***@127.0.0.1:9/hook (traceback in the run log)\n") in proc.stderr
    assert "RuntimeError('cannot reach http://cb:***@127.0.0.1:9/hook')" in (tmp_path / "rd" / "train.log").read_text()
    (tmp_path / "leaky_callback.py").unlink()  # the source holds the password: the run wrote none
    _assert_masked(proc, tmp_path)
