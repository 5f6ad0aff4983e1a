"""`s3://bucket/prefix` through boto3: resumable multipart upload, every part and the object verified.

A large file goes up as a multipart upload whose UploadId is recorded in the run directory before
the first part is sent. When an attempt fails (an outage, a dropped connection, trainvisor killed),
the next attempt asks the store which parts it already holds (ListParts), keeps those whose
checksum (else ETag) is that of the local bytes, and sends only the rest: a 5 GB checkpoint
interrupted at 4 GB costs 1 GB more, not 5. boto3's `upload_file` cannot do this: its multipart
upload lives only in memory and is aborted on failure.

Each part goes with its CRC32C, which the store checks, and its reply is checked against it; the
finished object (HEAD) against the composite CRC32C built from them and the file's length. A store
that returns no checksum is verified by MD5 ETags instead (s3_verify.py); s3_multipart.py sends
the parts. A recorded upload of an older version of the file, or one that failed permanently, is
aborted so no orphaned parts stay billed in the bucket.

A recorded upload the store no longer knows may be one it completed just before trainvisor was
killed (or before the reply to CompleteMultipartUpload was lost): the object is then HEADed and,
when its size and checksum are those of the local bytes (cut at the recorded part size), taken as
uploaded; nothing is sent again. `stored` does the same check for a caller that knows an earlier
attempt was interrupted (a small file has no record to go by).
"""
from __future__ import annotations

import hashlib
import os
import secrets
from typing import Callable, Iterator, NamedTuple, Optional

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from .base import Progress, ReadError, StoredObject, UploadedObject, UploadError
from .credentials import S3Credentials
from .destinations import parse_destination
from .records import ResumeRecords, S3ResumeRecord
from .s3_multipart import object_sum, send_parts
from .s3_open import OpenUploads
from .s3_verify import (PART, UPLOAD_CRC, Kind, bytes_checksum, combined_etag, crc32_text, file_etag, local_crc,
                        local_etag, matching_checksum, object_checksum, part_size_for)

__all__ = ["S3Uploader", "part_size_for", "file_etag"]

_PERMANENT = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket", "403", "404"}


def _signing(endpoint_url: Optional[str]) -> Optional[dict]:
    """Over TLS the body is not hashed for the signature, as boto3 does when it sends a checksum
    (its CRC trailer): the CRC header sent with every body, signed, is what the store checks it
    with. botocore would otherwise SHA-256 every byte, because a checksum it did not compute
    itself does not count for it. Over plain HTTP the body stays signed (botocore's rule)."""
    https = endpoint_url is None or endpoint_url.lower().startswith("https:")
    return {"payload_signing_enabled": False} if https else None


class _Expected(NamedTuple):
    """What the stored object must be, computed only for the kind the store answers with:
    `crc(kind, composite)` the CRC (`-N` when composite), `etag()` the MD5 ETag."""

    parts: int
    crc: Callable[[Kind, bool], str]
    etag: Callable[[], str]


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3Uploader(OpenUploads):
    """One bucket. `state_dir` (the run directory) keeps UploadIds so a restarted trainvisor
    resumes; without it, retries within this process still resume."""

    def __init__(self, bucket: str, *, url: str, endpoint_url: Optional[str] = None,
                 concurrency: int = 8, part_size: int = PART, state_dir: Optional[str] = None,
                 credentials: Optional["S3Credentials"] = None) -> None:
        self.url, self.bucket = url, bucket
        # The settings boto3's upload_file would be given for the same job (the bench baseline).
        self.config = TransferConfig(multipart_threshold=part_size, multipart_chunksize=part_size,
                                     max_concurrency=concurrency, use_threads=True)
        creds = credentials or S3Credentials()
        self._client = boto3.session.Session(
            aws_access_key_id=creds.access_key_id, aws_secret_access_key=creds.secret_access_key,
            aws_session_token=creds.session_token, region_name=creds.region).client(
            "s3", endpoint_url=endpoint_url,
            config=Config(retries={"max_attempts": 3, "mode": "standard"},
                          max_pool_connections=max(10, concurrency * 2), s3=_signing(endpoint_url)))
        # As s3transfer does: unless the user turned default checksums off
        # (AWS_REQUEST_CHECKSUM_CALCULATION=when_required, for stores that refuse them), the
        # upload is created with a CRC (CRC32C: the cheapest) and every part carries one that the
        # store checks.
        self._checksums = self._client.meta.config.request_checksum_calculation == "when_supported"
        self._checksum = {"ChecksumAlgorithm": UPLOAD_CRC.algorithm} if self._checksums else {}
        self._prefix = parse_destination(url).prefix
        self._records = ResumeRecords(os.path.join(state_dir, "s3-progress") if state_dir else None)

    def _error(self, what: str, exc: Exception) -> UploadError:
        if isinstance(exc, ClientError):
            code = _code(exc)
            # 401/403 whatever the code (a scoped key, a disabled account, a skewed clock botocore
            # could not correct): the same request will be refused again.
            denied = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") in (401, 403)
            return UploadError(f"{what} on {self.url}: {code}", retryable=code not in _PERMANENT and not denied)
        retry = isinstance(exc, (EndpointConnectionError, BotoCoreError))
        # Which endpoint could not be reached (its password masked by UploadError, as any message's)
        where = f" at {self._client.meta.endpoint_url}" if isinstance(exc, EndpointConnectionError) else ""
        return UploadError(f"{what} on {self.url}: {type(exc).__name__}{where}", retryable=retry)

    def preflight(self) -> None:
        """Write and delete a probe object under the configured prefix: a key scoped to the
        prefix (how platforms hand out buckets) may write nowhere else. Its name is new each
        time, so two runs sharing a prefix never delete each other's probe. `retryable` as for
        an upload: an outage (no connection, 5xx, SlowDown), not a refusal (credentials, bucket)."""
        probe = "/".join(filter(None, [self._prefix, f".trainvisor-probe-{secrets.token_hex(6)}"]))
        try:
            self._client.put_object(Bucket=self.bucket, Key=probe, Body=b"probe")
            self._client.delete_object(Bucket=self.bucket, Key=probe)
        except (ClientError, BotoCoreError) as exc:
            raise self._error("cannot write a probe object", exc) from exc

    def upload(self, local_path: str, key: str, *, progress: Optional[Progress] = None) -> UploadedObject:
        progress = progress or (lambda n: None)
        try:
            st = os.stat(local_path)
            with open(local_path, "rb") as f:
                if st.st_size < self.config.multipart_threshold:
                    want = self._put_whole(f, key, progress)
                else:
                    want = self._multipart(f.fileno(), key, st, progress)
                head = self._client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
                checksum = object_checksum(key, head, st.st_size, parts=want.parts, crc=want.crc, etag=want.etag)
        except FileNotFoundError:
            raise UploadError(f"{local_path}: no such file", retryable=False) from None
        except (ClientError, BotoCoreError, UploadError) as exc:  # before OSError: a read timeout is both
            err = exc if isinstance(exc, UploadError) else self._error(f"upload of {key}", exc)
            # A recorded upload is kept for the next attempt unless it cannot help any more.
            if isinstance(exc, ClientError) and _code(exc) == "NoSuchUpload":  # expired or aborted
                self._records.forget(key)
            elif not err.retryable:
                self._abort_recorded(key)
            if err is exc:
                raise
            raise err from exc
        except OSError as exc:
            raise UploadError(f"cannot read {local_path}: {exc.strerror}", retryable=False) from exc
        return UploadedObject(key=key, size=head["ContentLength"], checksum=checksum)

    def stored(self, local_path: str, key: str) -> Optional[UploadedObject]:
        """The object under `key` when it already holds exactly the bytes of `local_path` (same
        size and checksum, else ETag), else None. Called for a key an interrupted attempt may have finished."""
        try:
            st = os.stat(local_path)
            with open(local_path, "rb") as f:
                part = self._recorded_part_size(key, st) or part_size_for(st.st_size, self.config.multipart_chunksize)
                checksum = self._matching_object(key, f.fileno(), st.st_size, part)
        except (ClientError, BotoCoreError) as exc:  # before OSError: a read timeout is both
            raise self._error(f"HEAD of {key}", exc) from exc
        except OSError as exc:
            raise UploadError(f"cannot read {local_path}: {exc.strerror}", retryable=False) from exc
        if checksum is None:
            return None
        self._abort_recorded(key)  # completed already (NoSuchUpload), or no longer needed
        return UploadedObject(key=key, size=st.st_size, checksum=checksum)

    def _recorded_part_size(self, key: str, st: os.stat_result) -> Optional[int]:
        record = self._recorded(key)
        ok = record is not None and record.is_for(self.bucket, st.st_size, st.st_mtime_ns, record.part_size)
        return record.part_size if ok else None  # type: ignore[union-attr]

    def _matching_object(self, key: str, fd: int, size: int, part: int) -> Optional[str]:
        """The stored object's checksum (`kind:value`) when its size and checksum are those of
        the local bytes. The file is read only when the sizes agree (a 404 costs one HEAD)."""
        try:
            head = self._client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
        except ClientError as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        return matching_checksum(head, fd, size, part, multipart=size >= self.config.multipart_threshold)

    def _put_whole(self, f, key: str, progress: Progress) -> _Expected:
        """One PUT, its CRC computed once and sent: the store checks the bytes against it."""
        data = f.read()
        crc = UPLOAD_CRC.fn(data, 0)
        sums = {**self._checksum, UPLOAD_CRC.field: crc32_text(crc)} if self._checksums else {}
        self._client.put_object(Bucket=self.bucket, Key=key, Body=data, **sums)
        progress(len(data))
        return _Expected(0, lambda kind, composite: kind.text(bytes_checksum(kind, data, crc)),
                         lambda: hashlib.md5(data).hexdigest())

    def _recorded(self, key: str) -> Optional[S3ResumeRecord]:
        stored = self._records.get(key)
        return None if stored is None else S3ResumeRecord.from_json_dict(stored)

    def _multipart(self, fd: int, key: str, st: os.stat_result, progress: Progress) -> _Expected:
        part = part_size_for(st.st_size, self.config.multipart_chunksize)
        held: dict[int, dict] = {}
        record = self._recorded(key)
        if record is not None and not (record.is_for(self.bucket, st.st_size, st.st_mtime_ns, part)
                                       and self._same_checksum(key)):
            self._abort_recorded(key)  # parts of another version of the file, or of another checksum
            record = None
        if record is not None:
            try:
                held = self._held_parts(key, record.upload_id)
            except ClientError as exc:
                if _code(exc) != "NoSuchUpload":
                    raise
                self._records.forget(key)
                # Gone: aborted or expired, or completed by the store just before the last
                # attempt heard of it. Then the object is this file and nothing is sent.
                done = self._matching_object(key, fd, st.st_size, record.part_size)
                if done is not None:
                    value = done.partition(":")[2]
                    return _Expected(-(-st.st_size // record.part_size), lambda kind, composite: value, lambda: value)
                record = None
        if record is None:
            self._abort_open(key)  # created by a killed attempt before its record was written
            upload_id = self._client.create_multipart_upload(Bucket=self.bucket, Key=key,
                                                             **self._checksum)["UploadId"]
            record = S3ResumeRecord(upload_id, self.bucket, st.st_size, st.st_mtime_ns, part)
            self._records.put(key, {**record.to_json_dict(), "checksum": self._checksum.get("ChecksumAlgorithm", "")})
        parts = send_parts(self._client, self.bucket, key, record.upload_id, fd, st.st_size, part, held, progress,
                           checksums=self._checksums, concurrency=self.config.max_request_concurrency)
        self._client.complete_multipart_upload(Bucket=self.bucket, Key=key, UploadId=record.upload_id,
                                               MultipartUpload={"Parts": [p.entry for p in parts]})
        self._records.forget(key)
        size = st.st_size

        def crc(kind: Kind, composite: bool) -> str:  # made of the parts' when each had one, else the file read again
            return object_sum(parts, kind, composite) or local_crc(fd, size, part, composite=composite, kind=kind)

        def etag() -> str:  # only for a store that returns no checksum
            md5s = [p.md5 for p in parts]
            if None in md5s:
                return local_etag(fd, size, part, multipart=True)
            return combined_etag(md5s)  # type: ignore[arg-type]

        return _Expected(len(parts), crc, etag)

    def _same_checksum(self, key: str) -> bool:
        """Whether the recorded upload was created asking for the checksum parts are sent with
        now: S3 refuses a part whose checksum is not its upload's. A record without one was
        written when every upload asked for CRC32."""
        asked = (self._records.get(key) or {}).get("checksum", "CRC32")
        return asked == self._checksum.get("ChecksumAlgorithm", "")

    def _held_parts(self, key: str, upload_id: str) -> dict[int, dict]:
        pages = self._client.get_paginator("list_parts").paginate(Bucket=self.bucket, Key=key, UploadId=upload_id)
        return {p["PartNumber"]: p for page in pages for p in page.get("Parts", ())}

    def _abort_recorded(self, key: str) -> None:
        stored = self._records.get(key)
        if stored is None:
            return
        record = S3ResumeRecord.from_json_dict(stored)
        try:
            if record is not None:
                self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=record.upload_id)
        except (ClientError, BotoCoreError):
            pass  # already gone, or the store is down: the bucket's lifecycle rule is the backstop
        self._records.forget(key)

    # -- reading (StoreReader) --------------------------------------------------------------

    def _read_error(self, what: str, exc: Exception) -> ReadError:
        err = self._error(what, exc)
        return ReadError(str(err), retryable=err.retryable)

    def list_objects(self, prefix: str) -> Iterator[StoredObject]:
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", ()):
                    yield StoredObject(item["Key"], item["Size"], item["LastModified"].timestamp())
        except (ClientError, BotoCoreError) as exc:
            raise self._read_error(f"listing {prefix or '/'}", exc) from exc

    def stat_object(self, key: str) -> Optional[StoredObject]:
        try:
            head = self._client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._read_error(f"HEAD of {key}", exc) from exc
        except BotoCoreError as exc:
            raise self._read_error(f"HEAD of {key}", exc) from exc
        return StoredObject(key, head["ContentLength"], head["LastModified"].timestamp())

    def read_object(self, key: str, offset: int = 0) -> Iterator[bytes]:
        """A ranged GET from `offset` (a resumed download asks only for what it lacks)."""
        ranged = {"Range": f"bytes={offset}-"} if offset else {}
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=key, **ranged)["Body"]
        except ClientError as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                raise ReadError(f"{key}: no such object in {self.url}", retryable=False) from None
            raise self._read_error(f"GET of {key}", exc) from exc
        except BotoCoreError as exc:
            raise self._read_error(f"GET of {key}", exc) from exc
        return self._body_pieces(key, body)

    def _body_pieces(self, key: str, body) -> Iterator[bytes]:
        try:
            yield from body.iter_chunks(1 << 20)
        except (BotoCoreError, OSError) as exc:  # a connection cut mid-body
            raise ReadError(f"GET of {key} on {self.url}: {type(exc).__name__}", retryable=True) from exc
        finally:
            body.close()
