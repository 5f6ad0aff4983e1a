"""Shared test fixtures: repository paths, the real logs, and leak checks."""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
FAKE_CAFFE = FIXTURES / "bin" / "fake-caffe"
REAL_LOGS = ROOT.parent / "shared" / "real-logs"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Nothing in the tests may reach a public host (see trainvisor's uploaders).
os.environ.setdefault("TRAINVISOR_OFFLINE", "1")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
# A run's node and ranks come from launchers' variables (trainvisor/identity.py): a suite started
# under Slurm or torchrun would store every test's checkpoints under node-N/ and label its records.
for _name in ("NODE_RANK", "GROUP_RANK", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "JOB_COMPLETION_INDEX",
              "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID"):
    os.environ.pop(_name, None)


def real_logs(framework: str) -> Path:
    """The shared real-log folder of one framework, or skip with the reason."""
    d = REAL_LOGS / framework
    if not d.is_dir():
        pytest.skip(f"real logs not available: {d} does not exist (they live in ../shared/real-logs beside the repo)")
    return d


def pytest_addoption(parser, pluginmanager):
    """The project's own tests use its pytest plugin. Installed (CI: `pip install -e .`), the
    `pytest11` entry point has registered it; from a checkout on another install's path, it is
    registered here, under the entry point's name (so `-p no:trainvisor` still turns it off) and
    while options are still being added (so `--trainvisor-update-golden` is one)."""
    if pluginmanager.has_plugin("trainvisor") or pluginmanager.is_blocked("trainvisor"):
        return
    from trainvisor.testing import plugin

    pluginmanager.register(plugin, "trainvisor")


@pytest.fixture
def fake_caffe() -> list[str]:
    """argv prefix that runs fixtures/bin/fake-caffe with this interpreter (no PATH wrapper)."""
    return [sys.executable, str(FAKE_CAFFE)]


@pytest.fixture(scope="session", autouse=True)
def children_temp_dir(tmp_path_factory):
    """The processes the tests start keep their temporary files under the session's base temp,
    removed with it: a trainvisor SIGKILLed on purpose (the resume tests) cannot remove its run-log
    socket's directory, and no test may leave files in /tmp. (That a killed trainvisor leaves that
    directory at all is issue 21's to fix: its socket is to live where the process's death takes it.)"""
    own = tmp_path_factory.mktemp("children-tmp")
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(own)
    yield own
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Fail a test that leaves a thread of its own running."""
    before = set(threading.enumerate())
    yield
    import time

    deadline = time.monotonic() + 5  # a thread may still be on its way out: each is joined until then
    for t in [t for t in threading.enumerate() if t not in before]:
        try:
            t.join(max(0.0, deadline - time.monotonic()))
        except RuntimeError:  # a thread Python did not start (a dummy): it is only counted
            pass
    extra = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    if extra:
        pytest.fail(f"test leaked threads: {[t.name for t in extra]}")


KODO_AK = "AK-trainvisor-test-3f9a"
KODO_SK = "SK-trainvisor-secret-77c1"


@pytest.fixture
def kodo(tmp_path, monkeypatch):
    """A Kodo-protocol server on 127.0.0.1 (tests/kodo_server.py) with bucket `ckpt`, and the
    QINIU_* environment pointing at it (inherited by trainvisor subprocesses)."""
    from .kodo_server import KodoServer

    server = KodoServer(access_key=KODO_AK, secret_key=KODO_SK, buckets=["ckpt"], root=tmp_path / "kodo-store")
    server.start()
    monkeypatch.setenv("QINIU_ACCESS_KEY", KODO_AK)
    monkeypatch.setenv("QINIU_SECRET_KEY", KODO_SK)
    monkeypatch.setenv("QINIU_UP_HOST", server.url)
    monkeypatch.setenv("QINIU_RS_HOST", server.url)
    monkeypatch.delenv("QINIU_REGION", raising=False)
    try:
        yield server
    finally:
        server.stop()


def s3_env(endpoint: str, tmp_path: Path, **overrides: str) -> dict[str, str]:
    """Environment for a trainvisor subprocess talking to the S3 server at `endpoint`: dummy
    credentials, no AWS config files, no instance-metadata lookups, offline mode."""
    (tmp_path / "aws-none").write_text("")
    return {**os.environ, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, "AWS_EC2_METADATA_DISABLED": "true",
            "TRAINVISOR_OFFLINE": "1", "AWS_CONFIG_FILE": str(tmp_path / "aws-none"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-none"), **overrides}


def _moto_server():
    """A real moto S3 server (HTTP) on 127.0.0.1; its URL, then stopped."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def moto_endpoint():
    """A real moto S3 server (HTTP) on 127.0.0.1; its URL."""
    yield from _moto_server()


@pytest.fixture(scope="module")
def moto_module_endpoint():
    """One moto S3 server for a whole test module (each test uses a bucket of its own)."""
    yield from _moto_server()
