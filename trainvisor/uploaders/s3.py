"""`s3://bucket/prefix` through boto3: multipart with a tuned TransferConfig, ETag verified after.

The ETag of a multipart object is md5 of the part md5s plus `-N`; we compute it locally with the
same part size and compare, so a corrupted or truncated upload is caught.
"""
from __future__ import annotations

import hashlib
import os
from typing import Optional

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from .background import Background
from .base import Progress, UploadedObject, UploadError

__all__ = ["S3Uploader"]

_PART = 8 << 20
_PERMANENT = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket", "403", "404"}


def multipart_etag(path: str, part_size: int, threshold: int) -> str:
    """The ETag S3 gives `path` uploaded by s3transfer with this part size and threshold."""
    size = os.path.getsize(path)
    digests = []
    with open(path, "rb") as f:
        while chunk := f.read(part_size):
            digests.append(hashlib.md5(chunk).digest())
    if size < threshold:
        return (digests[0] if digests else hashlib.md5(b"").digest()).hex()
    return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"


class S3Uploader:
    def __init__(self, bucket: str, *, url: str, endpoint_url: Optional[str] = None,
                 concurrency: int = 8, part_size: int = _PART) -> None:
        self.url, self.bucket = url, bucket
        self.config = TransferConfig(multipart_threshold=part_size, multipart_chunksize=part_size,
                                     max_concurrency=concurrency, use_threads=True)
        self._client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint_url,
            config=Config(retries={"max_attempts": 3, "mode": "standard"},
                          max_pool_connections=max(10, concurrency * 2)))

    def _error(self, what: str, exc: Exception) -> UploadError:
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            return UploadError(f"{what} on {self.url}: {code}", retryable=code not in _PERMANENT)
        retry = isinstance(exc, (EndpointConnectionError, BotoCoreError))
        return UploadError(f"{what} on {self.url}: {type(exc).__name__}", retryable=retry)

    def preflight(self) -> None:
        probe = ".trainvisor-probe"
        try:
            self._client.put_object(Bucket=self.bucket, Key=probe, Body=b"probe")
            self._client.delete_object(Bucket=self.bucket, Key=probe)
        except (ClientError, BotoCoreError) as exc:
            err = self._error("cannot write a probe object", exc)
            raise UploadError(str(err), retryable=False) from exc

    def upload(self, local_path: str, key: str, *, progress: Optional[Progress] = None) -> UploadedObject:
        if not os.path.exists(local_path):
            raise UploadError(f"{local_path}: no such file", retryable=False)
        want_etag = Background(lambda: multipart_etag(local_path, self.config.multipart_chunksize,
                                                      self.config.multipart_threshold))
        try:
            self._client.upload_file(local_path, self.bucket, key, Config=self.config, Callback=progress)
            head = self._client.head_object(Bucket=self.bucket, Key=key)
        except (ClientError, BotoCoreError) as exc:
            want_etag.result()
            raise self._error(f"upload of {key}", exc) from exc
        want = want_etag.result()
        got = head["ETag"].strip('"')
        if got != want or head["ContentLength"] != os.path.getsize(local_path):
            raise UploadError(f"{key}: stored ETag {got} does not match the file ({want})", retryable=True)
        return UploadedObject(key=key, size=head["ContentLength"], checksum=f"etag:{got}")
