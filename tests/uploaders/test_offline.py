"""TRAINVISOR_OFFLINE=1 refuses every destination that is not on loopback before anything is
resolved or contacted, a Qiniu region id included (the SDK derives public hosts from it)."""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from trainvisor.errors import ConfigError
from trainvisor.uploaders import open_uploader

_NETWORK = {"socket.getaddrinfo", "socket.gethostbyname", "socket.connect", "socket.sendto"}
_seen: list[tuple[str, object]] = []
_watching = threading.Event()


def _audit(event: str, args: tuple) -> None:
    if _watching.is_set() and event in _NETWORK:
        _seen.append((event, args[:2] if event != "socket.connect" else args[1]))


sys.addaudithook(_audit)  # hooks cannot be removed: this one records only while _watching is set


@pytest.fixture
def network_calls():
    _seen.clear()
    _watching.set()
    yield _seen
    _watching.clear()


@pytest.mark.parametrize("url, env", [
    ("kodo://ckpt/p", {"QINIU_REGION": "z0"}),
    ("kodo://ckpt/p", {"QINIU_REGION": "z0", "QINIU_RS_HOST": "http://127.0.0.1:9"}),
    ("kodo://ckpt/p", {"QINIU_UP_HOST": "http://127.0.0.1:9", "QINIU_RS_HOST": "https://rs.qiniuapi.com"}),
    ("s3://ckpt/p", {}),
])
def test_offline_mode_refuses_before_resolving_anything(monkeypatch, network_calls, url, env):
    for name in ("QINIU_UP_HOST", "QINIU_RS_HOST", "QINIU_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("QINIU_ACCESS_KEY", "a")
    monkeypatch.setenv("QINIU_SECRET_KEY", "b")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=r"^TRAINVISOR_OFFLINE=1 but \S+ would reach ") as err:
        open_uploader(url)
    assert "\n" not in str(err.value)
    assert network_calls == []


def test_the_cli_refuses_a_region_in_one_line_and_never_starts_the_training(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "TRAINVISOR_OFFLINE": "1", "QINIU_REGION": "z0", "QINIU_ACCESS_KEY": "a",
           "QINIU_SECRET_KEY": "b"}
    marker = tmp_path / "ran"
    done = subprocess.run([sys.executable, "-m", "trainvisor", "run", "--run-dir", str(tmp_path / "run"),
                           "--upload-to", "kodo://ckpt/p", "--", "touch", str(marker)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert done.stderr == "trainvisor: TRAINVISOR_OFFLINE=1 but kodo://ckpt/p would reach Qiniu's public hosts\n"
    assert not marker.exists()
