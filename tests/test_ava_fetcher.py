"""`Fetcher().fetch(url)` -> (content, err): http:// from a local server, the SDK's
qiniu://zone/bucket/key from the Kodo-protocol server through the qiniu SDK; a cut download
resumed from the bytes received, an error returned, never raised."""
from __future__ import annotations

import functools
import os
import threading
from http.server import SimpleHTTPRequestHandler

import pytest

from trainvisor.compat.ava.utils.fetcher import Fetcher

from .conftest import KODO_AK, KODO_SK
from .http_servers import TrackingServer


@pytest.fixture
def http_dir(tmp_path):
    """A plain HTTP server on 127.0.0.1 serving `tmp_path/www`; (its URL, the folder)."""
    www = tmp_path / "www"
    www.mkdir()

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = TrackingServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(www)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="http-www")
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", www
    finally:
        server.shutdown()
        server.server_close()
        server.close_connections()
        thread.join(10)


def test_an_http_file_is_fetched_and_a_missing_one_is_an_error(http_dir, tmp_path):
    url, www = http_dir
    data = os.urandom(300_000)
    (www / "labels.bin").write_bytes(data)
    content, err = Fetcher().fetch(f"{url}/labels.bin")
    assert err is None and content == data
    content, err = Fetcher(retries=0).fetch(f"{url}/nothing.bin")
    assert content is None and str(err) == f"GET {url}/nothing.bin: HTTP 404"
    target = tmp_path / "out" / "labels.bin"
    target.parent.mkdir()
    assert Fetcher().fetch_huge_file(f"{url}/labels.bin", target) is None
    assert target.read_bytes() == data and not (tmp_path / "out" / "labels.bin.part").exists()


def test_a_qiniu_url_is_read_from_kodo_resumed_after_a_cut_and_checked(tmp_path, kodo, monkeypatch):
    from trainvisor.compat.ava.utils.uploader import Uploader

    monkeypatch.setenv("QINIU_DOWNLOAD_HOST", kodo.download_url("ckpt"))
    model = tmp_path / "model.tar.gz"
    model.write_bytes(os.urandom(3 << 20))
    Uploader(KODO_AK, KODO_SK, "ckpt").upload_file(str(model), "ava/default/models/m1/model.tar.gz")
    kodo.inject("GET", r"^/~dl/", "cut")  # the first read stops half way
    waits: list[float] = []
    target = tmp_path / "fetched.tar.gz"
    err = Fetcher(sleep=waits.append).fetch_huge_file("qiniu://1380001@z0/ckpt/ava/default/models/m1/model.tar.gz",
                                                     target)
    assert err is None and target.read_bytes() == model.read_bytes()
    assert len(waits) == 1
    assert kodo.bytes_sent < 2 * (3 << 20)  # the second read started where the first was cut
    content, err = Fetcher(retries=0).fetch("qiniu://z0/ckpt/ava/default/models/none")
    assert content is None and str(err) == "qiniu://z0/ckpt/ava/default/models/none: no such object"
    content, err = Fetcher().fetch("ftp://host/file")
    assert content is None and "only http://, https:// and qiniu://zone/bucket/key" in str(err)


def test_a_kodo_object_whose_bytes_differ_from_its_hash_is_refused_and_nothing_is_written(tmp_path, kodo,
                                                                                         monkeypatch):
    from trainvisor.compat.ava.utils.uploader import Uploader

    monkeypatch.setenv("QINIU_DOWNLOAD_HOST", kodo.download_url("ckpt"))
    model = tmp_path / "model.bin"
    model.write_bytes(os.urandom(1 << 20))
    Uploader(KODO_AK, KODO_SK, "ckpt").upload_file(str(model), "m/model.bin")
    stored = kodo.object_path("ckpt", "m/model.bin")
    damaged = bytearray(stored.read_bytes())
    damaged[1000] ^= 0xFF  # same size: only the etag tells
    stored.write_bytes(bytes(damaged))
    target = tmp_path / "out.bin"
    err = Fetcher().fetch_huge_file("qiniu://z0/ckpt/m/model.bin", target)
    assert str(err) == "qiniu://z0/ckpt/m/model.bin: the bytes received differ from the stored object (qiniu etag)"
    assert not target.exists() and not (tmp_path / "out.bin.part").exists()
