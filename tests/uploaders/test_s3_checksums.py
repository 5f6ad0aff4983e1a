"""S3 uploads verified by the checksum the store returns, through the fault proxy in front of a
real moto server: ETags that are no MD5 (an SSE-KMS bucket's), a store that returns no checksum
(MD5 ETags, as before), one that returns neither (refused once, not retried for ever), a byte
flipped on the way (detected, sent again), and credentials scoped to the prefix (the preflight's
probe and every request stay under it). Uploads ask for CRC32C; expected checksums are computed
here from the file's bytes with the crc32c module and hashlib, apart from the code under test."""
from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import subprocess
import zlib

import boto3
import pytest
from crc32c import crc32c

from tests.conftest import s3_env
from tests.faultproxy import FaultProxy
from tests.uploaders.test_s3_faults import _file, _manager, _submit
from trainvisor.checkpoints import Manifest
from trainvisor.uploaders.base import UploadError
from trainvisor.uploaders.s3 import S3Uploader

MB = 1 << 20
PART = 8 * MB
TRAINVISOR = [__import__("sys").executable, "-m", "trainvisor"]


@pytest.fixture
def proxied(moto, monkeypatch):
    # botocore's default (checksums when supported) whatever this shell says; a test that wants
    # them off says so
    monkeypatch.delenv("AWS_REQUEST_CHECKSUM_CALCULATION", raising=False)
    boto3.client("s3", endpoint_url=moto).create_bucket(Bucket="ckpt")
    with FaultProxy(moto) as proxy:
        yield proxy, boto3.client("s3", endpoint_url=moto)


def _b64(crc: int) -> str:
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def _composite(path: str) -> str:
    """S3's COMPOSITE CRC32C of the file sent in 8 MiB parts: the CRC of the parts' CRCs, -N."""
    data = open(path, "rb").read()
    crcs = [crc32c(data[i:i + PART]).to_bytes(4, "big") for i in range(0, len(data), PART)]
    return f"{_b64(crc32c(b''.join(crcs)))}-{len(crcs)}"


def _up(proxy, url: str = "s3://ckpt/p", **kw) -> S3Uploader:
    return S3Uploader("ckpt", url=url, endpoint_url=proxy.url, **kw)


def test_etags_that_are_no_md5_are_passed_over_for_the_crc32c_the_store_returns(proxied, tmp_path):
    proxy, s3 = proxied
    proxy.rewrite_etags()
    big, small = _file(tmp_path, 20 * MB), tmp_path / "small.bin"
    small.write_bytes(os.urandom(MB))
    up = _up(proxy)
    assert up.upload(big, "p/big").checksum == f"crc32c:{_composite(big)}"
    assert up.upload(str(small), "p/small").checksum == f"crc32c:{_b64(crc32c(small.read_bytes()))}"
    assert proxy.count("POST", r"uploadId=", status=200) == 1 and proxy.count("PUT", "partNumber=") == 3
    assert s3.get_object(Bucket="ckpt", Key="p/big")["Body"].read() == open(big, "rb").read()
    head = s3.head_object(Bucket="ckpt", Key="p/big")  # straight from moto: the ETag is an MD5
    assert not head["ETag"].startswith('"kms')


def test_a_resumed_upload_never_keeps_a_part_it_cannot_verify(proxied, tmp_path):
    """moto's ListParts gives no part checksums (S3's does) and the ETags here are no MD5: the
    parts the store holds cannot be checked, so they are sent again, not trusted."""
    proxy, s3 = proxied
    proxy.rewrite_etags()
    src = _file(tmp_path, 30 * MB)  # parts 1..4
    up = _up(proxy, state_dir=str(tmp_path / "run"))
    proxy.inject("PUT", r"/ckpt/k$", 503, times=10, query_regex=r"(^|&)partNumber=3(&|$)")
    with pytest.raises(UploadError):
        up.upload(src, "k")
    proxy.clear_faults()
    first, mark = proxy.accepted_parts(), len(proxy.requests)
    assert up.upload(src, "k").checksum == f"crc32c:{_composite(src)}"
    assert first and sorted(proxy.accepted_parts(mark)) == [1, 2, 3, 4]
    assert s3.get_object(Bucket="ckpt", Key="k")["Body"].read() == open(src, "rb").read()


def test_without_checksums_the_md5_etag_still_verifies(proxied, tmp_path, monkeypatch):
    proxy, s3 = proxied
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")  # no CRC asked, none returned
    src = _file(tmp_path, 20 * MB)
    data = open(src, "rb").read()
    md5s = b"".join(hashlib.md5(data[i:i + PART]).digest() for i in range(0, len(data), PART))
    assert _up(proxy).upload(src, "p/big").checksum == f"etag:{hashlib.md5(md5s).hexdigest()}-3"


@pytest.mark.parametrize("size, said", [
    (20 * MB, r"p/x: part \d was stored with ETag kms\w+ and no checksum: nothing to verify it with$"),
    (MB, r"p/x: the store returned no checksum and an ETag that is no MD5 \(kms\w+\): the upload cannot be verified")])
def test_a_store_returning_neither_checksum_nor_md5_is_refused_once(proxied, tmp_path, monkeypatch, size, said):
    proxy, _ = proxied
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
    proxy.rewrite_etags()
    with pytest.raises(UploadError) as err:
        _up(proxy).upload(_file(tmp_path, size), "p/x")
    assert not err.value.retryable and re.match(said, str(err.value)) and "\n" not in str(err.value)


def send_with_a_byte_flipped(proxy, tmp_path, caplog) -> str:
    """A 4-part set file sent through the manager, the middle byte of part 2 flipped on its way
    the first time: the set ends verified, part 2 accepted twice. The file's path."""
    src = _file(tmp_path, 30 * MB)
    proxy.inject("PUT", r"/ckpt/p/r1/net_iter_100\.caffemodel$", "flip", query_regex=r"(^|&)partNumber=2(&|$)")
    m = _manager(proxy, tmp_path)
    with caplog.at_level(logging.WARNING, logger="trainvisor"):
        _submit(m, src)
        report = m.drain(60)
    m.close()
    assert report.pending == () and report.failed == ()
    assert proxy.accepted_parts().count(2) == 2  # the damaged one, then the right one
    return src


def test_a_byte_flipped_on_the_way_is_detected_and_the_object_sent_again(proxied, tmp_path, caplog):
    """moto stores a part without checking the CRC32C sent with it (S3 refuses it: BadDigest),
    but computes the object's composite CRC32C from the bytes it holds: the HEAD shows the damage."""
    proxy, s3 = proxied
    src = send_with_a_byte_flipped(proxy, tmp_path, caplog)
    assert "p/r1/net_iter_100.caffemodel: stored CRC32C " in caplog.text and "does not match the file" in caplog.text
    assert s3.get_object(Bucket="ckpt", Key="p/r1/net_iter_100.caffemodel")["Body"].read() == open(src, "rb").read()
    manifest = Manifest.from_json(s3.get_object(Bucket="ckpt", Key="p/r1/net_iter_100.manifest.json")["Body"].read())
    assert [(f.checksum_kind, f.checksum) for f in manifest.files] == [("crc32c", f"crc32c:{_composite(src)}")]


def test_credentials_scoped_to_the_prefix_pass_the_preflight_and_the_upload(proxied, tmp_path):
    proxy, s3 = proxied
    proxy.scope("ckpt", "team/")
    with pytest.raises(UploadError) as err:  # a probe at the bucket's root is refused
        _up(proxy, url="s3://ckpt").preflight()
    assert str(err.value) == "cannot write a probe object on s3://ckpt: AccessDenied"
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.bin").write_bytes(os.urandom(9 * MB))  # two parts
    (src / "b.txt").write_text("hello")
    env = s3_env(proxy.url, tmp_path)
    done = subprocess.run(TRAINVISOR + ["upload", str(src), "--to", "s3://ckpt/team"], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    refused = [r for r in proxy.requests if r[3] == 403]
    assert refused == [("PUT", "/ckpt/.trainvisor-probe-" + refused[0][1].rpartition("-")[2], "", 403)]
    probes = [(m, s) for m, p, _, s in proxy.requests if p.startswith("/ckpt/team/.trainvisor-probe-")]
    assert probes == [("PUT", 200), ("DELETE", 204)]
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="ckpt", Prefix="team/")["Contents"]]
    assert sorted(k.rpartition("/")[2] for k in keys) == ["a.bin", "b.txt"]  # the probe deleted
    assert not [o for o in s3.list_objects_v2(Bucket="ckpt").get("Contents", []) if "probe" in o["Key"]]


def test_an_object_boto3_stored_with_crc32_is_recognised_and_downloads_verify_it(proxied, tmp_path):
    """boto3's upload_file (its default CRC32, 8 MiB parts) stored the file: `stored` finds it by
    that CRC32, and a download checks the received bytes the same way."""
    from boto3.s3.transfer import TransferConfig

    from trainvisor.uploaders.checksums import checksum_like

    proxy, s3 = proxied
    src = _file(tmp_path, 20 * MB)
    s3.upload_file(src, "ckpt", "p/by-boto3", Config=TransferConfig(multipart_chunksize=PART))
    data = open(src, "rb").read()
    crcs = b"".join(zlib.crc32(data[i:i + PART]).to_bytes(4, "big") for i in range(0, len(data), PART))
    want = f"crc32:{_b64(zlib.crc32(crcs))}-3"
    assert _up(proxy).stored(src, "p/by-boto3").checksum == want
    assert checksum_like(src, want) == want
    with open(src, "r+b") as fh:  # one byte differs: the download would refuse it
        fh.seek(12 * MB)
        fh.write(bytes([data[12 * MB] ^ 1]))
    assert checksum_like(src, want) != want and _up(proxy).stored(src, "p/by-boto3") is None


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_over_tls_the_body_is_not_hashed_for_the_signature_the_crc_header_is(moto, tmp_path, monkeypatch, scheme):
    """As boto3 does with its CRC trailer: over TLS the signed checksum header vouches for the
    body (no SHA-256 of every byte); over plain HTTP the body stays signed. Seen on the signed
    request itself, sent to a port where nothing listens."""
    import socket

    monkeypatch.delenv("AWS_REQUEST_CHECKSUM_CALCULATION", raising=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    up = S3Uploader("ckpt", url="s3://ckpt", endpoint_url=f"{scheme}://127.0.0.1:{port}")
    up._client.meta.config.retries = {"max_attempts": 1, "mode": "standard"}
    sent = []
    up._client.meta.events.register("before-send.s3.PutObject", lambda request, **kw: sent.append(request.headers))
    src = tmp_path / "small.bin"
    src.write_bytes(b"x" * 1000)
    with pytest.raises(UploadError):
        up.upload(str(src), "k")
    signed = sent[0]["X-Amz-Content-SHA256"]
    assert sent[0]["x-amz-checksum-crc32c"] == _b64(crc32c(b"x" * 1000)).encode()
    assert signed == (b"UNSIGNED-PAYLOAD" if scheme == "https" else hashlib.sha256(b"x" * 1000).hexdigest().encode())


def test_an_upload_an_older_trainvisor_began_with_crc32_is_started_over_not_mixed(proxied, tmp_path):
    """Its record (no checksum named: uploads asked for CRC32 then) and two CRC32 parts in the
    store: S3 would refuse CRC32C parts in it, so it is aborted and a new upload sent."""
    from trainvisor.uploaders.records import ResumeRecords, S3ResumeRecord

    proxy, s3 = proxied
    src = _file(tmp_path, 30 * MB)
    data, st = open(src, "rb").read(), os.stat(src)
    old = s3.create_multipart_upload(Bucket="ckpt", Key="k", ChecksumAlgorithm="CRC32")["UploadId"]
    for n in (1, 2):
        s3.upload_part(Bucket="ckpt", Key="k", UploadId=old, PartNumber=n, Body=data[(n - 1) * PART:n * PART],
                       ChecksumAlgorithm="CRC32")
    record = S3ResumeRecord(old, "ckpt", st.st_size, st.st_mtime_ns, PART)
    ResumeRecords(str(tmp_path / "run" / "s3-progress")).put("k", record.to_json_dict())
    obj = _up(proxy, state_dir=str(tmp_path / "run")).upload(src, "k")
    assert obj.checksum == f"crc32c:{_composite(src)}"
    assert proxy.count("DELETE", rf"uploadId={old}", status=204) == 1  # the old upload, aborted
    assert proxy.count("POST", r"(^|&)uploads(=|&|$)", status=200) == 1
    assert sorted(proxy.accepted_parts()) == [1, 2, 3, 4]
    assert s3.get_object(Bucket="ckpt", Key="k")["Body"].read() == data
