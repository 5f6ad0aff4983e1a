"""S3 objects a store keeps with SHA256 or CRC64NVME are verified with that checksum, not passed
over: a store that checksums again (the fault proxy restating moto's replies: each part's, each
small object's, the object's COMPOSITE or FULL_OBJECT), a byte flipped on the way (caught at the
part, sent again), and an object another client stored with ChecksumAlgorithm='SHA256' (moto's
own SHA256), found by a restart and checked by `trainvisor download`. Expected values are
computed here from the file's bytes: SHA256 by hashlib, CRC64NVME by the C function that
test_crc64nvme.py holds to published vectors."""
from __future__ import annotations

import base64
import hashlib
import os
import subprocess

import boto3
import pytest

from tests.conftest import s3_env
from tests.faultproxy import FaultProxy
from tests.uploaders.test_s3_checksums import send_with_a_byte_flipped
from tests.uploaders.test_s3_faults import _file
from trainvisor.checkpoints import Manifest
from trainvisor.uploaders.checksums import checksum_like
from trainvisor.uploaders.crc64nvme import crc64nvme
from trainvisor.uploaders.s3 import S3Uploader

MB = 1 << 20
PART = 8 * MB
TRAINVISOR = [__import__("sys").executable, "-m", "trainvisor"]


@pytest.fixture
def proxied(moto, monkeypatch):
    monkeypatch.delenv("AWS_REQUEST_CHECKSUM_CALCULATION", raising=False)  # botocore's default: checksums on
    boto3.client("s3", endpoint_url=moto).create_bucket(Bucket="ckpt")
    with FaultProxy(moto) as proxy:
        yield proxy, boto3.client("s3", endpoint_url=moto)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _crc64(data: bytes) -> bytes:
    return crc64nvme(data).to_bytes(8, "big")


def _expected(algorithm: str, full: bool, data: bytes, multipart: bool) -> str:
    """The manifest's value for these bytes as the store keeps them: `kind:base64[-N]`."""
    fn, kind = (_sha256, "s3-sha256") if algorithm == "SHA256" else (_crc64, "crc64nvme")
    if full or not multipart:
        return f"{kind}:{_b64(fn(data))}"
    parts = [fn(data[i:i + PART]) for i in range(0, len(data), PART)]
    return f"{kind}:{_b64(fn(b''.join(parts)))}-{len(parts)}"


def _rewrite_after_completion(up: S3Uploader, path: str) -> None:
    """Once the store has the parts, the local file changes (same size): only a checksum made of
    the parts' own, computed while they were sent, still matches the store; one read again from
    the file would not."""
    def change(**_kw) -> None:
        with open(path, "r+b") as fh:
            fh.write(b"\0" * 64)

    up._client.meta.events.register("after-call.s3.CompleteMultipartUpload", change)


@pytest.mark.parametrize("algorithm, full, calculation", [
    ("SHA256", False, "when_supported"), ("CRC64NVME", True, "when_supported"), ("SHA256", True, "when_supported"),
    ("CRC64NVME", True, "when_required")],
    ids=["sha256-composite", "crc64nvme-full-object", "sha256-full-object", "crc64nvme-sent-without-checksums"])
def test_a_store_keeping_another_checksum_is_verified_with_it(proxied, tmp_path, monkeypatch, algorithm, full,
                                                              calculation):
    """The last case is AWS S3's own default: no checksum sent (AWS_REQUEST_CHECKSUM_CALCULATION=
    when_required), the store keeps CRC64NVME for each part and the whole object."""
    proxy, s3 = proxied
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", calculation)
    proxy.restate_checksums(algorithm, full_object=full)
    big, small = _file(tmp_path, 20 * MB), tmp_path / "small.bin"
    small.write_bytes(os.urandom(MB))
    sent = open(big, "rb").read()
    up = S3Uploader("ckpt", url="s3://ckpt/p", endpoint_url=proxy.url)
    made_of_parts = not (algorithm == "SHA256" and full)  # a full-object SHA256 is the file's, read again
    if made_of_parts:
        _rewrite_after_completion(up, big)
    obj = up.upload(big, "p/big")
    assert obj.checksum == _expected(algorithm, full, sent, multipart=True)
    assert up.upload(str(small), "p/small").checksum == _expected(algorithm, full, small.read_bytes(), False)
    head = s3.head_object(Bucket="ckpt", Key="p/big", ChecksumMode="ENABLED")  # moto's own: what was asked for
    assert ("ChecksumCRC32C" in head) == (calculation == "when_supported")
    assert proxy.count("PUT", "partNumber=") == 3
    assert s3.get_object(Bucket="ckpt", Key="p/big")["Body"].read() == sent
    # `trainvisor download` computes the same from the bytes it receives; one byte off, it differs
    got = tmp_path / "got.bin"
    got.write_bytes(sent)
    assert checksum_like(str(got), obj.checksum) == obj.checksum
    got.write_bytes(sent[:5 * MB] + bytes([sent[5 * MB] ^ 1]) + sent[5 * MB + 1:])
    assert checksum_like(str(got), obj.checksum) != obj.checksum


@pytest.mark.parametrize("algorithm", ["SHA256", "CRC64NVME"])
def test_a_byte_flipped_on_the_way_is_caught_by_that_checksum_and_the_part_sent_again(proxied, tmp_path, caplog,
                                                                                     algorithm):
    proxy, s3 = proxied
    proxy.restate_checksums(algorithm)
    src = send_with_a_byte_flipped(proxy, tmp_path, caplog)
    assert f"part 2 was stored with {algorithm} " in caplog.text and "not that of its bytes" in caplog.text
    data = open(src, "rb").read()
    assert s3.get_object(Bucket="ckpt", Key="p/r1/net_iter_100.caffemodel")["Body"].read() == data
    manifest = Manifest.from_json(s3.get_object(Bucket="ckpt", Key="p/r1/net_iter_100.manifest.json")["Body"].read())
    kind = "s3-sha256" if algorithm == "SHA256" else "crc64nvme"
    assert [(f.checksum_kind, f.checksum) for f in manifest.files] == [
        (kind, _expected(algorithm, algorithm == "CRC64NVME", data, multipart=True))]


def test_an_object_boto3_stored_with_sha256_is_found_by_a_restart_and_checked_by_download(moto, tmp_path,
                                                                                          monkeypatch):
    """A run's set is on disk and recorded complete (checkpoints.jsonl), its journal lost; the
    objects are in the store already, put there by boto3 with ChecksumAlgorithm='SHA256' (moto
    keeps the parts' SHA256 and the COMPOSITE). The restart asks the store, finds them by that
    SHA256, sends no byte again and records `s3-sha256:` in the manifest; `trainvisor download`
    checks the received files with it, and refuses an object changed since."""
    from boto3.s3.transfer import TransferConfig

    from trainvisor.events import Checkpoint, CheckpointFile
    from trainvisor.uploaders.manager import UploadManager
    from trainvisor.watch.record import CheckpointRecord

    monkeypatch.delenv("AWS_REQUEST_CHECKSUM_CALCULATION", raising=False)
    s3 = boto3.client("s3", endpoint_url=moto)
    s3.create_bucket(Bucket="sha")
    snap, run = tmp_path / "snap", tmp_path / "run"
    snap.mkdir()
    run.mkdir()
    weights = _file(snap, 20 * MB)
    state = snap / "net_iter_100.solverstate"
    state.write_bytes(os.urandom(300_000))
    cp = Checkpoint(name="net_iter_100", files=(CheckpointFile(weights, "net_iter_100.caffemodel"),
                                                 CheckpointFile(str(state), "net_iter_100.solverstate")),
                    iteration=100, epoch=None, root=str(snap))
    CheckpointRecord(run / "checkpoints.jsonl").submit(cp)
    for f in cp.files:
        s3.upload_file(f.path, "sha", f"b/r1/{f.relpath}", ExtraArgs={"ChecksumAlgorithm": "SHA256"},
                       Config=TransferConfig(multipart_chunksize=PART, multipart_threshold=PART))
    with FaultProxy(moto) as proxy:
        up = S3Uploader("sha", url="s3://sha/b", endpoint_url=proxy.url, state_dir=str(run))
        m = UploadManager(up, run_dir=str(run), run_id="r1", prefix="b")
        assert m.resume() == 1
        report = m.drain(60)
        m.close()
    assert report.pending == () and report.failed == ()
    assert [r[:2] for r in proxy.requests if r[0] in ("PUT", "POST")] == [
        ("PUT", "/sha/b/r1/net_iter_100.manifest.json")]  # only the manifest was sent
    data = open(weights, "rb").read()
    manifest = Manifest.from_json(s3.get_object(Bucket="sha", Key="b/r1/net_iter_100.manifest.json")["Body"].read())
    assert [f.checksum for f in manifest.files] == [_expected("SHA256", False, data, multipart=True),
                                                     _expected("SHA256", False, state.read_bytes(), False)]
    env = s3_env(moto, tmp_path)
    out = tmp_path / "out"
    done = subprocess.run(TRAINVISOR + ["download", "s3://sha/b/r1", "-o", str(out)], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "net_iter_100.caffemodel").read_bytes() == data and done.stderr.endswith("verified\n")
    changed = data[:9 * MB] + bytes([data[9 * MB] ^ 1]) + data[9 * MB + 1:]
    s3.put_object(Bucket="sha", Key="b/r1/net_iter_100.caffemodel", Body=changed, ChecksumAlgorithm="SHA256")
    again = subprocess.run(TRAINVISOR + ["download", "s3://sha/b/r1", "-o", str(tmp_path / "out2")],
                           capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert again.returncode != 0 and "net_iter_100.caffemodel" in again.stderr, again.stderr
    assert not (tmp_path / "out2" / "net_iter_100.caffemodel").exists()


def test_an_object_stored_with_a_full_object_crc64nvme_is_recognised_from_the_file(proxied, tmp_path):
    """Another client's multipart upload, which the store keeps as CRC64NVME (AWS S3's default
    for an object written without a checksum): `stored` (a restart's question) reads the file
    once and finds it by that CRC; one byte different, it is not this file."""
    from boto3.s3.transfer import TransferConfig

    proxy, _ = proxied
    proxy.restate_checksums("CRC64NVME")
    src = _file(tmp_path, 20 * MB)
    other = boto3.client("s3", endpoint_url=proxy.url)
    other.upload_file(src, "ckpt", "p/by-boto3", Config=TransferConfig(multipart_chunksize=PART))
    data = open(src, "rb").read()
    want = f"crc64nvme:{_b64(_crc64(data))}"
    up = S3Uploader("ckpt", url="s3://ckpt/p", endpoint_url=proxy.url)
    assert up.stored(src, "p/by-boto3").checksum == want
    with open(src, "r+b") as fh:
        fh.seek(15 * MB)
        fh.write(bytes([data[15 * MB] ^ 1]))
    assert up.stored(src, "p/by-boto3") is None
