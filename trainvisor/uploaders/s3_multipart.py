"""The parts of one multipart upload, sent by a small pool, each read once and verified.

Each worker reads its part once (`pread`), computes its CRC32C on those bytes (UPLOAD_CRC, see
s3_verify.py; the GIL is released, so parts are checksummed in parallel) and sends both: the
store checks the bytes against the CRC it is given and refuses a damaged part, and botocore
computes nothing more. A part the
store already holds (listed by ListParts after an interrupted attempt) is kept when its size
and checksum (else its MD5 ETag) are those of the local bytes; the rest are sent. The MD5 of a
part is computed only when the store's reply carries no checksum (see s3_verify.py). A store that
answers with another kind (SHA256, CRC64NVME: a gateway that checksums again) has each part
checked with that kind while its bytes are in memory; the object's is then made of those
(`object_sum`: composite, or CRC64NVME's full-object CRC combined), not read from the file again.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import FIRST_EXCEPTION, wait
from typing import NamedTuple, Optional

from .base import Progress, UploadError
from .pool import DaemonThreadPool
from .s3_kinds import Kind
from .s3_verify import UPLOAD_CRC, crc32_text, part_verdict, stored_crc

__all__ = ["SentPart", "send_parts", "object_sum"]


class SentPart(NamedTuple):
    """One part the store holds: what CompleteMultipartUpload is given, the kind of checksum the
    store keeps for it and its raw value of the part's bytes (None: none stored), its size, and
    its md5 (None unless the ETag was what verified it)."""

    entry: dict
    kind: Optional[Kind]
    raw: Optional[bytes]
    size: int
    md5: Optional[bytes]


def object_sum(parts: list[SentPart], kind: Kind, composite: bool) -> Optional[str]:
    """The object's checksum of `kind` made of its parts' (COMPOSITE, or a FULL_OBJECT CRC that
    can be combined), when every part was verified with that kind; None: the file must be read."""
    if not parts or any(p.kind != kind for p in parts):
        return None
    if composite:
        return kind.composite([p.raw for p in parts])  # type: ignore[misc]
    return kind.joined([(p.raw, p.size) for p in parts])  # type: ignore[misc]


class _Upload(NamedTuple):
    client: object
    bucket: str
    key: str
    upload_id: str
    fd: int
    size: int
    part: int
    checksums: bool


def _one(up: _Upload, number: int, held: Optional[dict], stop: threading.Event, progress: Progress) -> SentPart:
    if stop.is_set():  # another part failed: this attempt is over
        raise UploadError("cancelled", retryable=True)
    offset = (number - 1) * up.part
    length = min(up.part, up.size - offset)
    data = os.pread(up.fd, length, offset)
    if len(data) != length:
        raise UploadError(f"{up.key}: the file shrank during its upload", retryable=True)
    crc = UPLOAD_CRC.fn(data, 0) if up.checksums else None
    reply = held
    if reply is None or reply.get("Size") != length or part_verdict(reply, crc, data).why is not None:
        sums = {"ChecksumAlgorithm": UPLOAD_CRC.algorithm, UPLOAD_CRC.field: crc32_text(crc)} if crc is not None else {}
        reply = up.client.upload_part(Bucket=up.bucket, Key=up.key, UploadId=up.upload_id,  # type: ignore[attr-defined]
                                      PartNumber=number, Body=data, **sums)
    verdict = part_verdict(reply, crc, data)
    if verdict.why is not None:
        raise UploadError(f"{up.key}: part {number} {verdict.why}", retryable=verdict.retryable)
    progress(length)
    entry = {"PartNumber": number, "ETag": reply["ETag"]}
    stored = stored_crc(reply)
    if stored is not None:  # S3 wants the parts' checksums back at completion
        entry[stored[0].field] = stored[1]
    return SentPart(entry, stored[0] if stored else None, verdict.raw, length, verdict.md5)


def send_parts(client, bucket: str, key: str, upload_id: str, fd: int, size: int, part: int,
               held: dict[int, dict], progress: Progress, *, checksums: bool, concurrency: int) -> list[SentPart]:
    """Every part of the file in order of number, held or sent, verified; the first failure
    cancels the parts not started and is raised."""
    up = _Upload(client, bucket, key, upload_id, fd, size, part, checksums)
    stop = threading.Event()
    count = -(-size // part)
    try:
        with DaemonThreadPool(concurrency, thread_name_prefix="trainvisor-s3") as pool:
            futures = [pool.submit(_one, up, n, held.get(n), stop, progress) for n in range(1, count + 1)]
            wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f.done() and f.exception() is not None), None)
            if failed is not None:
                stop.set()
                for f in futures:
                    f.cancel()
                raise failed.exception()  # type: ignore[misc]
    finally:
        stop.set()
    return [f.result() for f in futures]
