"""The Kodo-protocol test server, driven by the real qiniu SDK: every upload protocol the
uploader may use, and the checks that make a client's mistakes fail."""
from __future__ import annotations

import io
import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
import qiniu
from qiniu.http.endpoint import Endpoint
from qiniu.http.region import Region, ServiceName
from qiniu.services.storage.uploaders import FormUploader, ResumeUploaderV1, ResumeUploaderV2
from qiniu.utils import etag_stream

from .conftest import KODO_AK, KODO_SK
from .kodo_server import KodoServer

MB = 1 << 20


@pytest.fixture
def server(tmp_path):
    with KodoServer(access_key=KODO_AK, secret_key=KODO_SK, buckets=["b"], root=tmp_path / "store") as s:
        yield s


def regions(server):
    ep = Endpoint.from_host(server.url)
    return [Region(services={ServiceName.UP: [ep], ServiceName.RS: [ep]})]


AUTH = qiniu.Auth(KODO_AK, KODO_SK)


def test_form_upload_returns_the_etag_and_stores_the_bytes(server):
    data = os.urandom(300_000)
    ret, info = FormUploader("b", regions=regions(server)).upload("k", data=data, up_token=AUTH.upload_token("b", "k"))
    assert info.status_code == 200 and ret == {"hash": etag_stream(io.BytesIO(data)), "key": "k"}
    assert server.read_object("b", "k") == data and info.req_id  # X-Reqid present


def test_resumable_v1_mkblk_mkfile(server, tmp_path):
    src = tmp_path / "f"
    src.write_bytes(os.urandom(9 * MB + 3))
    with ThreadPoolExecutor(2) as pool:
        up = ResumeUploaderV1("b", regions=regions(server), concurrent_executor=pool)
        with open(src, "rb") as fh:
            ret, info = up.upload("big", data=fh, data_size=src.stat().st_size, up_token=AUTH.upload_token("b", "big"))
    assert info.status_code == 200 and ret["hash"] == qiniu.etag(str(src))
    assert server.read_object("b", "big") == src.read_bytes()
    assert [p.split("/")[1] for m, p, s in server.requests].count("mkblk") == 3


def test_resumable_v2_parts_and_complete(server, tmp_path):
    src = tmp_path / "f"
    src.write_bytes(os.urandom(10 * MB))
    with ThreadPoolExecutor(3) as pool:
        up = ResumeUploaderV2("b", regions=regions(server), concurrent_executor=pool, part_size=4 * MB)
        with open(src, "rb") as fh:
            ret, info = up.upload("v2", data=fh, data_size=src.stat().st_size, up_token=AUTH.upload_token("b", "v2"))
    assert info.status_code == 200 and ret["hash"] == qiniu.etag(str(src))
    assert server.read_object("b", "v2") == src.read_bytes()
    assert sorted(p.rsplit("/", 1)[1] for m, p, s in server.requests if m == "PUT") == ["1", "2", "3"]


def test_bad_signature_expired_token_missing_bucket_and_wrong_key(server):
    form = FormUploader("b", regions=regions(server))
    cases = {
        "bad token": qiniu.Auth(KODO_AK, "not-the-secret").upload_token("b", "k"),
        "expired token": AUTH.upload_token("b", "k", expires=-10),
        "no such bucket": AUTH.upload_token("nob", "k"),
        "key doesn't match with scope": AUTH.upload_token("b", "other"),
    }
    for error, token in cases.items():
        ret, info = form.upload("k", data=b"x", up_token=token)
        assert ret is None and json.loads(info.text_body)["error"] == error, error
    assert [s for m, p, s in server.requests] == [401, 401, 631, 403]
    assert server.object_path("b", "k") is None


def test_bucket_scope_is_insert_only_key_scope_overwrites(server):
    form = FormUploader("b", regions=regions(server))
    assert form.upload("k", data=b"one", up_token=AUTH.upload_token("b"))[0] is not None
    assert form.upload("k", data=b"one", up_token=AUTH.upload_token("b"))[0] is not None  # same bytes: fine
    ret, info = form.upload("k", data=b"two", up_token=AUTH.upload_token("b"))
    assert ret is None and info.status_code == 614
    assert form.upload("k", data=b"two", up_token=AUTH.upload_token("b", "k"))[0] is not None
    assert server.read_object("b", "k") == b"two" and server.object_writes("b", "k") == 3


def test_management_stat_and_delete_are_signed(server):
    FormUploader("b", regions=regions(server)).upload("k", data=b"abc", up_token=AUTH.upload_token("b", "k"))
    bm = qiniu.BucketManager(AUTH, regions=regions(server))
    ret, info = bm.stat("b", "k")
    assert info.status_code == 200 and ret["fsize"] == 3 and ret["hash"] == etag_stream(io.BytesIO(b"abc"))
    _, info = qiniu.BucketManager(qiniu.Auth(KODO_AK, "wrong"), regions=regions(server)).delete("b", "k")
    assert info.status_code == 401 and server.object_path("b", "k") is not None
    _, info = bm.delete("b", "k")
    assert info.status_code == 200 and server.object_path("b", "k") is None
    assert bm.stat("b", "k")[1].status_code == 612


def test_content_md5_mismatch_and_unknown_upload_id_are_refused(server):
    import requests

    url = f"{server.url}/buckets/b/objects/{qiniu.urlsafe_base64_encode('k')}/uploads"
    token = {"Authorization": f"UpToken {AUTH.upload_token('b', 'k')}"}
    upload_id = requests.post(url, headers=token).json()["uploadId"]
    r = requests.put(f"{url}/{upload_id}/1", data=b"part", headers={**token, "Content-MD5": "0" * 32})
    assert r.status_code == 400 and "Content-MD5" in r.json()["error"]
    r = requests.put(f"{url}/nosuchid/1", data=b"part", headers=token)
    assert r.status_code == 612 and r.headers["X-Reqid"]


def test_faults_status_drop_and_down(server):
    form = FormUploader("b", regions=regions(server))
    server.inject("POST", r"^/$", 503)
    ret, info = form.upload("k", data=b"x", up_token=AUTH.upload_token("b", "k"))
    assert ret is None and info.status_code == 503
    server.inject("POST", r"^/$", "drop")
    ret, info = form.upload("k", data=b"x" * 100_000, up_token=AUTH.upload_token("b", "k"))
    assert ret is None and info.status_code == -1
    server.down(60)
    ret, info = form.upload("k", data=b"x", up_token=AUTH.upload_token("b", "k"))
    assert ret is None and info.status_code == -1
    server.up()
    assert form.upload("k", data=b"x", up_token=AUTH.upload_token("b", "k"))[0] is not None
    assert server.object_writes("b", "k") == 1
