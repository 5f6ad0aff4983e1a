"""The file:// store: round trip, atomic placement, clear errors."""
from __future__ import annotations

import hashlib
import os

import pytest

from trainvisor.errors import ConfigError
from trainvisor.uploaders import UploadError, open_uploader


def test_upload_round_trip_is_byte_identical_and_checksummed(tmp_path):
    src = tmp_path / "net_iter_100.caffemodel"
    data = os.urandom(3 << 20)
    src.write_bytes(data)
    sent = []
    up = open_uploader(f"file://{tmp_path / 'store'}")
    up.preflight()
    obj = up.upload(str(src), "runs/r1/net_iter_100.caffemodel", progress=sent.append)
    stored = tmp_path / "store" / "runs" / "r1" / "net_iter_100.caffemodel"
    assert stored.read_bytes() == data
    assert obj.size == len(data) == sum(sent)
    assert obj.checksum == "sha256:" + hashlib.sha256(data).hexdigest()
    assert not list(stored.parent.glob(".*trainvisor-tmp"))


def test_key_escaping_the_destination_is_refused(tmp_path):
    src = tmp_path / "f"
    src.write_bytes(b"x")
    up = open_uploader(f"file://{tmp_path / 'store'}")
    with pytest.raises(UploadError) as err:
        up.upload(str(src), "../outside")
    assert not err.value.retryable
    assert not (tmp_path / "outside").exists()


def test_missing_source_is_a_permanent_error(tmp_path):
    up = open_uploader(f"file://{tmp_path / 'store'}")
    with pytest.raises(UploadError) as err:
        up.upload(str(tmp_path / "nope"), "k")
    assert not err.value.retryable and "no such file" in str(err.value)


def test_unwritable_destination_fails_preflight(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"")
    with pytest.raises(UploadError, match="cannot write to file://"):
        open_uploader(f"file://{blocker}/store").preflight()


def test_unknown_scheme_names_the_url_and_known_schemes():
    with pytest.raises(ConfigError, match=r"unsupported upload destination 'ftp://x/y' \(known: file://, kodo://, s3://\)"):
        open_uploader("ftp://x/y")
