"""`trainvisor download` from the moto S3 server and the Kodo-protocol server (the real boto3 and
qiniu SDKs), each filled by a real `trainvisor run --upload-to`: the newest set byte for byte
(S3: a multipart object's ETag recomputed), an interrupted download continued by a ranged read
(the store sends only the rest), and objects that no longer match their manifest refused."""
from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from .conftest import s3_env
from .test_download import SNAPSHOT, STATE_90, TRAINVISOR, WEIGHTS_90, Interrupted, stopping_after, upload_run

LARGE = 9 << 20  # the newest weights file: a two-part S3 upload (8 MiB parts)


def download_cli(*args: str, cwd: Path, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(TRAINVISOR + ["download", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120, env=env)


@pytest.fixture
def s3_store(moto_endpoint, tmp_path, monkeypatch):
    """A bucket `dl-ckpt` (its own: the moto server is the session's, shared with the upload tests) a run uploaded to under `backups/r1/`; the environment pointing at it."""
    import boto3

    env = s3_env(moto_endpoint, tmp_path)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
                 "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.setenv(name, env[name])  # the library calls read them from the environment
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    s3.create_bucket(Bucket="dl-ckpt")
    snap = upload_run(tmp_path / "work", "s3://dl-ckpt/backups", env=env,
                      extra=("--large-size", str(LARGE), "--large-every", "10"))
    return s3, snap


def test_s3_newest_set_downloads_byte_for_byte_and_continues_after_an_interruption(s3_store, tmp_path):
    import trainvisor

    s3, snap = s3_store
    # Stored in two parts: its ETag is the md5 of the parts' md5s, recomputed from the download.
    assert s3.head_object(Bucket="dl-ckpt", Key=f"backups/r1/{WEIGHTS_90}")["ETag"].endswith('-2"')

    out = tmp_path / "out"
    with pytest.raises(Interrupted):
        trainvisor.download("s3://dl-ckpt/backups/r1", out, progress=stopping_after(SNAPSHOT + (1 << 20)))
    done = download_cli("s3://dl-ckpt/backups/r1", "-o", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # The state file's part was whole already, the weights' had its first 1 MiB: 8 MiB were asked for.
    assert done.stderr == (f"downloaded set lenet_iter_90 (2 file(s), {(8 << 20) / 1e6:.1f} MB received, 2 continued "
                           f"from an earlier attempt) from s3://dl-ckpt/backups/r1 into {out}, verified\n")
    assert (out / STATE_90).read_bytes() == (snap / STATE_90).read_bytes()
    assert (out / WEIGHTS_90).read_bytes() == (snap / WEIGHTS_90).read_bytes()
    assert (out / WEIGHTS_90).stat().st_size == LARGE
    from trainvisor.uploaders import open_uploader

    reader = open_uploader("s3://dl-ckpt/backups")
    assert reader.stat_object(f"backups/r1/{WEIGHTS_90}").size == LARGE
    assert reader.stat_object("backups/r1/none") is None


def test_s3_changed_bytes_are_refused(s3_store, tmp_path):
    s3, snap = s3_store
    data = bytearray((snap / STATE_90).read_bytes())
    data[-1] ^= 0x01
    s3.put_object(Bucket="dl-ckpt", Key=f"backups/r1/{STATE_90}", Body=bytes(data))
    done = download_cli("s3://dl-ckpt/backups", "--set", "lenet_iter_90", "-o", "out", cwd=tmp_path)
    assert done.returncode == 3
    assert done.stderr.startswith(f"trainvisor: set lenet_iter_90 refused, nothing moved into out: {STATE_90}: "
                                  "checksum crc32c:") and done.stderr.count("\n") == 1
    assert sorted(p.name for p in (tmp_path / "out").rglob("*") if p.is_file()) == [
        "lenet_iter_90.caffemodel.part", "lenet_iter_90.caffemodel.part.json"]


@pytest.fixture
def kodo_store(kodo, tmp_path, monkeypatch):
    """Bucket `ckpt` of the Kodo-protocol server, uploaded to by a run under `backups/r1/`."""
    monkeypatch.setenv("QINIU_RSF_HOST", kodo.url)
    monkeypatch.setenv("QINIU_DOWNLOAD_HOST", kodo.download_url("ckpt"))
    return kodo, upload_run(tmp_path / "work", "kodo://ckpt/backups")


def test_kodo_newest_set_downloads_and_an_interrupted_one_asks_only_for_the_rest(kodo_store, tmp_path):
    import trainvisor

    kodo, snap = kodo_store
    out = tmp_path / "out"
    before = kodo.bytes_sent
    with pytest.raises(Interrupted):
        trainvisor.download("kodo://ckpt/backups", out, progress=stopping_after(1 << 20))
    received = (out / (STATE_90 + ".part")).stat().st_size
    assert received >= 1 << 20
    first = kodo.bytes_sent - before
    report = trainvisor.download("kodo://ckpt/backups", out)
    assert report.resumed == (STATE_90,) and report.bytes == 2 * SNAPSHOT - received
    # The first GET sent more than the test read before cutting it; the second call read the
    # manifests again and, of the files, only what the part lacked.
    manifests = sum(len(kodo.read_object("ckpt", k)) for k in kodo.keys("ckpt") if k.endswith(".manifest.json"))
    assert kodo.bytes_sent - before - first == manifests + 2 * SNAPSHOT - received
    assert [r for r in kodo.requests if r[0] == "GET" and r[2] == 206][-1][1].startswith(
        f"/~dl/ckpt/backups/r1/{STATE_90}?e=")
    for rel in (STATE_90, WEIGHTS_90):
        assert (out / rel).read_bytes() == (snap / rel).read_bytes()


def test_kodo_a_reply_cut_halfway_is_continued_by_a_ranged_read_within_the_call(kodo_store, tmp_path):
    import trainvisor
    from trainvisor.uploaders import open_uploader

    kodo, snap = kodo_store
    kodo.inject("GET", f"^/~dl/ckpt/backups/r1/{WEIGHTS_90}$", "cut")
    waits: list[float] = []
    report = trainvisor.download("kodo://ckpt/backups", tmp_path / "out", sleep=waits.append)
    assert waits == [1.0]  # one backoff, then the rest
    assert report.bytes == 2 * SNAPSHOT and report.resumed == ()  # nothing was left from an earlier call
    gets = [(path.split("?")[0], status) for method, path, status in kodo.requests if method == "GET"]
    assert gets[-2:] == [(f"/~dl/ckpt/backups/r1/{WEIGHTS_90}", 200), (f"/~dl/ckpt/backups/r1/{WEIGHTS_90}", 206)]
    assert (tmp_path / "out" / WEIGHTS_90).read_bytes() == (snap / WEIGHTS_90).read_bytes()
    reader = open_uploader("kodo://ckpt/backups")
    assert reader.stat_object(f"backups/r1/{WEIGHTS_90}").size == SNAPSHOT
    assert reader.stat_object("backups/r1/none") is None


def test_kodo_a_missing_object_is_refused_and_a_signed_url_is_never_shown(kodo_store, tmp_path, monkeypatch):
    kodo, _snap = kodo_store
    entry = base64.urlsafe_b64encode(f"ckpt:backups/r1/{WEIGHTS_90}".encode()).decode()
    kodo.manage("delete", entry)
    # The reading hosts from a credentials file this time, as a platform mounts them.
    (tmp_path / "kodo.env").write_text(f"QINIU_RSF_HOST={kodo.url}\nQINIU_DOWNLOAD_HOST={kodo.download_url('ckpt')}\n")
    monkeypatch.delenv("QINIU_RSF_HOST")
    monkeypatch.delenv("QINIU_DOWNLOAD_HOST")
    done = download_cli("kodo://ckpt/backups/r1", "--set", "lenet_iter_90", "-o", "out",
                        "--credentials", "kodo.env", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (
        3, f"trainvisor: set 'lenet_iter_90' refused: {WEIGHTS_90}: missing from the store (backups/r1/{WEIGHTS_90})\n")
    latest = download_cli("kodo://ckpt/backups/r1", "-o", "out", "--credentials", "kodo.env", cwd=tmp_path)
    assert latest.returncode == 0, latest.stderr
    assert latest.stderr.splitlines()[0] == (f"trainvisor: passed over set lenet_iter_90: {WEIGHTS_90}: missing "
                                            f"from the store (backups/r1/{WEIGHTS_90})")
    assert "downloaded set lenet_iter_81 (2 file(s)" in latest.stderr and "token=" not in latest.stderr

