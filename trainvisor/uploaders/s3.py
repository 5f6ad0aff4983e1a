"""`s3://bucket/prefix` through boto3: resumable multipart upload, every part and the object verified.

A large file goes up as a multipart upload whose UploadId is recorded in the run directory before
the first part is sent. When an attempt fails (an outage, a dropped connection, trainvisor killed),
the next attempt asks the store which parts it already holds (ListParts), keeps those whose ETag
is the md5 of the local bytes, and sends only the rest: a 5 GB checkpoint interrupted at 4 GB
costs 1 GB more, not 5. boto3's `upload_file` cannot do this: its multipart upload lives only in
memory and is aborted on failure.

Each part's returned ETag is checked against the md5 of the bytes sent, and the finished object
(HEAD) against the multipart ETag built from them (md5 of the part md5s, `-N`) and the file's
length. A recorded upload of an older version of the file, or one that failed permanently, is
aborted so no orphaned parts stay billed in the bucket.

A recorded upload the store no longer knows may be one it completed just before trainvisor was
killed (or before the reply to CompleteMultipartUpload was lost): the object is then HEADed and,
when its size and ETag are those of the local bytes (cut at the recorded part size), taken as
uploaded; nothing is sent again. `stored` does the same check for a caller that knows an earlier
attempt was interrupted (a small file has no record to go by).
"""
from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, wait
from typing import Iterator, Optional

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from .base import Progress, ReadError, StoredObject, UploadedObject, UploadError
from .credentials import S3Credentials
from .pool import DaemonThreadPool
from .records import ResumeRecords, S3ResumeRecord
from .s3_open import OpenUploads

__all__ = ["S3Uploader", "part_size_for", "file_etag"]

_PART = 8 << 20
_MAX_PARTS = 10_000  # S3's limit on parts per upload
_PERMANENT = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket", "403", "404"}


def part_size_for(size: int, base: int = _PART) -> int:
    """`base`, grown in whole MiB when the file would need more than 10,000 parts."""
    need = -(-size // _MAX_PARTS)
    return max(base, -(-need // (1 << 20)) << 20)


def _combined_etag(digests: list[bytes]) -> str:
    return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"


def _local_etag(fd: int, size: int, part: int, *, multipart: bool) -> str:
    """The ETag S3 gives these bytes: md5 of the whole, or of the part md5s for a multipart upload."""
    if not multipart:
        md5 = hashlib.md5()
        for offset in range(0, size, _PART):
            md5.update(os.pread(fd, min(_PART, size - offset), offset))
        return md5.hexdigest()
    return _combined_etag([hashlib.md5(os.pread(fd, min(part, size - offset), offset)).digest()
                           for offset in range(0, size, part)])


def file_etag(path: str, like: str, base: int = _PART) -> str:
    """The ETag S3 gives this file when uploaded as the object whose ETag is `like` was: whole,
    or in N parts. The part size is not stored: trainvisor's own for this size is tried first,
    then each whole-MiB size that makes N parts (a few at most); the first that gives `like`
    wins, else the ETag under trainvisor's part size (a mismatch to report)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if "-" not in like:
            return _local_etag(f.fileno(), size, base, multipart=False)
        parts = int(like.rpartition("-")[2] or 0)
        mib = 1 << 20
        lowest = -(-size // max(parts, 1) // mib) or 1
        highest = (size - 1) // (parts - 1) // mib if parts > 1 else lowest
        own = part_size_for(size, base)
        for part in [own, *(p * mib for p in range(lowest, min(highest, lowest + 16) + 1) if p * mib != own)]:
            if -(-size // part) == parts and _local_etag(f.fileno(), size, part, multipart=True) == like:
                return like
        return _local_etag(f.fileno(), size, own, multipart=True)


def _etag(reply: dict) -> str:
    return str(reply.get("ETag", "")).strip('"')


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3Uploader(OpenUploads):
    """One bucket. `state_dir` (the run directory) keeps UploadIds so a restarted trainvisor
    resumes; without it, retries within this process still resume."""

    def __init__(self, bucket: str, *, url: str, endpoint_url: Optional[str] = None,
                 concurrency: int = 8, part_size: int = _PART, state_dir: Optional[str] = None,
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
                          max_pool_connections=max(10, concurrency * 2)))
        # As s3transfer does: unless the user turned default checksums off
        # (AWS_REQUEST_CHECKSUM_CALCULATION=when_required, for stores that refuse them), the
        # upload is created with CRC32 and every part carries one that the store checks.
        self._checksum = ({"ChecksumAlgorithm": "CRC32"}
                          if self._client.meta.config.request_checksum_calculation == "when_supported" else {})
        self._records = ResumeRecords(os.path.join(state_dir, "s3-progress") if state_dir else None)

    def _error(self, what: str, exc: Exception) -> UploadError:
        if isinstance(exc, ClientError):
            code = _code(exc)
            return UploadError(f"{what} on {self.url}: {code}", retryable=code not in _PERMANENT)
        retry = isinstance(exc, (EndpointConnectionError, BotoCoreError))
        # Which endpoint could not be reached (its password masked by UploadError, as any message's)
        where = f" at {self._client.meta.endpoint_url}" if isinstance(exc, EndpointConnectionError) else ""
        return UploadError(f"{what} on {self.url}: {type(exc).__name__}{where}", retryable=retry)

    def preflight(self) -> None:
        probe = ".trainvisor-probe"
        try:
            self._client.put_object(Bucket=self.bucket, Key=probe, Body=b"probe")
            self._client.delete_object(Bucket=self.bucket, Key=probe)
        except (ClientError, BotoCoreError) as exc:
            err = self._error("cannot write a probe object", exc)
            raise UploadError(str(err), retryable=False) from exc

    def upload(self, local_path: str, key: str, *, progress: Optional[Progress] = None) -> UploadedObject:
        progress = progress or (lambda n: None)
        try:
            st = os.stat(local_path)
            with open(local_path, "rb") as f:
                if st.st_size < self.config.multipart_threshold:
                    want = self._put_whole(f, key, progress)
                else:
                    want = self._multipart(f.fileno(), key, st, progress)
            head = self._client.head_object(Bucket=self.bucket, Key=key)
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
        got = head["ETag"].strip('"')
        if got != want or head["ContentLength"] != st.st_size:
            raise UploadError(f"{key}: stored ETag {got} does not match the file ({want})", retryable=True)
        return UploadedObject(key=key, size=head["ContentLength"], checksum=f"etag:{got}")

    def stored(self, local_path: str, key: str) -> Optional[UploadedObject]:
        """The object under `key` when it already holds exactly the bytes of `local_path` (same
        size and ETag), else None. Called for a key an interrupted attempt may have finished."""
        try:
            st = os.stat(local_path)
            with open(local_path, "rb") as f:
                part = self._recorded_part_size(key, st) or part_size_for(st.st_size, self.config.multipart_chunksize)
                etag = self._matching_object(key, f.fileno(), st.st_size, part)
        except (ClientError, BotoCoreError) as exc:  # before OSError: a read timeout is both
            raise self._error(f"HEAD of {key}", exc) from exc
        except OSError as exc:
            raise UploadError(f"cannot read {local_path}: {exc.strerror}", retryable=False) from exc
        if etag is None:
            return None
        self._abort_recorded(key)  # completed already (NoSuchUpload), or no longer needed
        return UploadedObject(key=key, size=st.st_size, checksum=f"etag:{etag}")

    def _recorded_part_size(self, key: str, st: os.stat_result) -> Optional[int]:
        record = self._recorded(key)
        ok = record is not None and record.is_for(self.bucket, st.st_size, st.st_mtime_ns, record.part_size)
        return record.part_size if ok else None  # type: ignore[union-attr]

    def _matching_object(self, key: str, fd: int, size: int, part: int) -> Optional[str]:
        """The stored object's ETag when its size and ETag are those of the local bytes. The
        file is hashed only when the sizes agree (a 404 or another size costs one HEAD)."""
        try:
            head = self._client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
        got = _etag(head)
        if head.get("ContentLength") != size:
            return None
        multipart = "-" in got
        if multipart and got.rpartition("-")[2] != str(-(-size // part)):
            return None  # another part size than the one recorded: not this upload
        return got if _local_etag(fd, size, part, multipart=multipart) == got else None

    def _put_whole(self, f, key: str, progress: Progress) -> str:
        data = f.read()
        self._client.put_object(Bucket=self.bucket, Key=key, Body=data)
        progress(len(data))
        return hashlib.md5(data).hexdigest()

    def _recorded(self, key: str) -> Optional[S3ResumeRecord]:
        stored = self._records.get(key)
        return None if stored is None else S3ResumeRecord.from_json_dict(stored)

    def _multipart(self, fd: int, key: str, st: os.stat_result, progress: Progress) -> str:
        part = part_size_for(st.st_size, self.config.multipart_chunksize)
        held: dict[int, dict] = {}
        record = self._recorded(key)
        if record is not None and not record.is_for(self.bucket, st.st_size, st.st_mtime_ns, part):
            self._abort_recorded(key)  # parts of another version of the file
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
                    return done
                record = None
        if record is None:
            self._abort_open(key)  # created by a killed attempt before its record was written
            upload_id = self._client.create_multipart_upload(Bucket=self.bucket, Key=key,
                                                             **self._checksum)["UploadId"]
            record = S3ResumeRecord(upload_id, self.bucket, st.st_size, st.st_mtime_ns, part)
            self._records.put(key, record.to_json_dict())
        parts = self._send_parts(fd, key, record.upload_id, st.st_size, part, held, progress)
        self._client.complete_multipart_upload(Bucket=self.bucket, Key=key, UploadId=record.upload_id,
                                               MultipartUpload={"Parts": [p for p, _ in parts]})
        self._records.forget(key)
        return _combined_etag([digest for _, digest in parts])

    def _held_parts(self, key: str, upload_id: str) -> dict[int, dict]:
        pages = self._client.get_paginator("list_parts").paginate(Bucket=self.bucket, Key=key, UploadId=upload_id)
        return {p["PartNumber"]: p for page in pages for p in page.get("Parts", ())}

    def _send_parts(self, fd: int, key: str, upload_id: str, size: int, part: int,
                    held: dict[int, dict], progress: Progress) -> list[tuple[dict, bytes]]:
        """Workers send parts while one thread hashes them ahead (hashing off the send path);
        a part the store already holds with the same md5 is not sent again."""
        stop = threading.Event()
        count = -(-size // part)
        hashes = _PartHashes(fd, size, part, stop)

        def one(number: int) -> tuple[dict, bytes]:
            if stop.is_set():  # another part failed: this attempt is over
                raise UploadError("cancelled", retryable=True)
            offset = (number - 1) * part
            length = min(part, size - offset)
            reply = held.get(number)
            # A held part is kept when it has this part's md5; a new part is sent before its
            # md5 is needed, so the hashing thread never holds the sender up.
            if reply is None or reply.get("Size") != length or _etag(reply) != hashes.get(number).hex():
                data = os.pread(fd, length, offset)
                if len(data) != length:
                    raise UploadError(f"{key}: the file shrank during its upload", retryable=True)
                reply = self._client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id,
                                                 PartNumber=number, Body=data, **self._checksum)
            digest = hashes.get(number)
            if _etag(reply) != digest.hex():
                raise UploadError(f"{key}: part {number} was stored with ETag {reply['ETag']}, "
                                  f"not the md5 of its bytes ({digest.hex()})", retryable=True)
            progress(length)
            entry = {"PartNumber": number, "ETag": reply["ETag"]}
            if reply.get("ChecksumCRC32"):  # S3 wants the parts' checksums back at completion
                entry["ChecksumCRC32"] = reply["ChecksumCRC32"]
            return entry, digest

        try:
            with DaemonThreadPool(self.config.max_request_concurrency, thread_name_prefix="trainvisor-s3") as pool:
                futures = [pool.submit(one, n) for n in range(1, count + 1)]
                wait(futures, return_when=FIRST_EXCEPTION)
                failed = next((f for f in futures if f.done() and f.exception() is not None), None)
                if failed is not None:
                    stop.set()
                    for f in futures:
                        f.cancel()
                    raise failed.exception()  # type: ignore[misc]
        finally:
            stop.set()
            hashes.join()
        return [f.result() for f in futures]

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


class _PartHashes:
    """The md5 of every part, computed in order by one thread that reads ahead of the senders."""

    def __init__(self, fd: int, size: int, part: int, stop: threading.Event) -> None:
        self._digests: list[Optional[bytes]] = [None] * -(-size // part)
        self._error: Optional[UploadError] = None
        self._cond = threading.Condition()
        self._stop = stop
        self._thread = threading.Thread(target=self._run, args=(fd, size, part), name="trainvisor-hash",
                                        daemon=True)
        self._thread.start()

    def _run(self, fd: int, size: int, part: int) -> None:
        try:
            for i in range(len(self._digests)):
                if self._stop.is_set():
                    raise UploadError("cancelled", retryable=True)
                length = min(part, size - i * part)
                data = os.pread(fd, length, i * part)
                if len(data) != length:
                    raise UploadError("the file shrank during its upload", retryable=True)
                digest = hashlib.md5(data).digest()
                with self._cond:
                    self._digests[i] = digest
                    self._cond.notify_all()
        except (UploadError, OSError) as exc:
            with self._cond:
                self._error = exc if isinstance(exc, UploadError) else UploadError(
                    f"cannot read the file: {exc.strerror}", retryable=False)
                self._cond.notify_all()

    def get(self, number: int) -> bytes:
        with self._cond:
            self._cond.wait_for(lambda: self._digests[number - 1] is not None or self._error is not None)
            digest = self._digests[number - 1]
            if digest is None:
                raise self._error  # type: ignore[misc]
            return digest

    def join(self) -> None:
        self._thread.join()
