"""S3 uploader against a real moto server on 127.0.0.1 (HTTP, no patching)."""
from __future__ import annotations

import os

import boto3
import pytest

from trainvisor.uploaders import UploadError
from trainvisor.uploaders.s3 import S3Uploader


def test_multipart_upload_is_verified_and_byte_identical(moto, tmp_path):
    boto3.client("s3", endpoint_url=moto).create_bucket(Bucket="ckpt")
    src = tmp_path / "big.caffemodel"
    src.write_bytes(os.urandom(1 << 20) * 20)
    up = S3Uploader("ckpt", url="s3://ckpt", endpoint_url=moto)
    up.preflight()
    obj = up.upload(str(src), "r1/big.caffemodel")
    body = boto3.client("s3", endpoint_url=moto).get_object(Bucket="ckpt", Key="r1/big.caffemodel")["Body"].read()
    assert body == src.read_bytes() and obj.size == len(body) and obj.checksum.endswith("-3")


def test_missing_bucket_fails_preflight_with_one_line(moto):
    with pytest.raises(UploadError) as err:
        S3Uploader("nobucket", url="s3://nobucket", endpoint_url=moto).preflight()
    assert not err.value.retryable
    assert str(err.value) == "cannot write a probe object on s3://nobucket: NoSuchBucket"
    assert "testing" not in str(err.value)


def test_offline_mode_refuses_the_public_aws_endpoint():
    from trainvisor.errors import ConfigError
    from trainvisor.uploaders import open_uploader

    with pytest.raises(ConfigError, match="TRAINVISOR_OFFLINE=1 but s3://b/p would reach the public AWS endpoint"):
        open_uploader("s3://b/p")


def test_parts_grow_in_whole_mib_so_no_file_needs_more_than_10000():
    from trainvisor.uploaders.s3 import part_size_for

    assert part_size_for(256 << 20) == 8 << 20
    assert part_size_for(80_000 << 20) == 8 << 20  # exactly 10,000 parts of 8 MiB
    big = (5 << 40) - 1  # S3's largest object
    assert part_size_for(big) == 525 << 20 and -(-big // part_size_for(big)) <= 10_000
