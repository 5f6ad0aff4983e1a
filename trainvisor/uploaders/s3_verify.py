"""What an S3 store says it holds, checked against the local bytes: its checksum when it returns
one, its MD5 ETag otherwise.

An upload asks for CRC32C (CRC32 when the `crc32c` module is missing): each part's (or the whole
small object's) CRC is computed once, while its bytes are in memory to be sent, and sent with them
(x-amz-checksum-crc32c), so the store checks what it received and refuses a part damaged on the
way. The reply and the object's HEAD (ChecksumMode=ENABLED) say what the store holds: a part's
checksum; a multipart object's as COMPOSITE (that of the parts' raw checksums, `-N`) or as
FULL_OBJECT (the whole file's). Whatever kind the store answers with (CRC32C, CRC32, CRC64NVME,
SHA256: s3_kinds.py) is computed from the bytes and compared: a store that re-checksums, or an
object another client stored with SHA256, is verified, not passed over. CRC32C is computed by
the CPU's own instruction (crc32c module): on this machine 256 MiB take 0.014 CPU-seconds,
against 0.04 for CRC64NVME (trainvisor's C), 0.06 for zlib's CRC32, 0.25 for SHA256 and 0.36 for
an MD5 (what made trainvisor's uploads cost 1.8x boto3's CPU). SSE-KMS buckets and S3-compatible
stores (MinIO with encryption, Ceph, R2) return ETags that are no MD5 at all: so the ETag is
compared only when no checksum comes back, and only then is an MD5 computed. A store that returns
neither cannot be verified: that is said once, not retried for ever.

A manifest records which one was verified: `crc32c:<base64>[-N]` (or `crc32:`, `crc64nvme:`,
`s3-sha256:`, for an object a store returns that one for) or `etag:<md5>[-N]`; `trainvisor
download` computes the same from the received file (`file_checksum`).
"""
from __future__ import annotations

import base64
import hashlib
import os
import re
from typing import Callable, Iterator, NamedTuple, Optional

from .base import UploadError
from .s3_kinds import KINDS, UPLOAD_CRC, Kind, kind_named

__all__ = ["PART", "Kind", "UPLOAD_CRC", "stored_crc", "crc32_text", "is_md5_etag", "Verdict",
           "part_verdict", "bytes_checksum", "object_checksum",
           "matching_checksum", "file_checksum", "file_etag", "combined_etag", "local_etag", "local_crc",
           "part_size_for"]

PART = 8 << 20
_MAX_PARTS = 10_000  # S3's limit on parts per upload
_MIB = 1 << 20
_MD5_ETAG = re.compile(r"[0-9a-f]{32}(-\d+)?")


def stored_crc(reply: dict) -> Optional[tuple[Kind, str]]:
    """The checksum a reply or HEAD carries (its kind, its text), or None."""
    return next(((k, str(reply[k.field])) for k in KINDS if reply.get(k.field)), None)


def part_size_for(size: int, base: int = PART) -> int:
    """`base`, grown in whole MiB when the file would need more than 10,000 parts."""
    need = -(-size // _MAX_PARTS)
    return max(base, -(-need // _MIB) << 20)


def crc32_text(crc: int) -> str:
    """A CRC32 (or CRC32C) as S3 writes it: base64 of its 4 big-endian bytes."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def is_md5_etag(etag: str) -> bool:
    """Whether an ETag can be an MD5 (of the bytes, or of the part MD5s with `-N`)."""
    return bool(_MD5_ETAG.fullmatch(etag))


def combined_etag(digests: list[bytes]) -> str:
    return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"


def _etag(reply: dict) -> str:
    return str(reply.get("ETag", "")).strip('"')


class Verdict(NamedTuple):
    """A part's reply judged: `why` it does not match the bytes (None: it does), whether trying
    again can help, the part's md5 when the ETag was what could be compared, else the raw
    checksum of the kind the store keeps (what the object's is made of)."""

    why: Optional[str]
    retryable: bool = True
    md5: Optional[bytes] = None
    raw: Optional[bytes] = None


def bytes_checksum(kind: Kind, data: bytes, crc: Optional[int]) -> bytes:
    """The raw checksum of `kind` of `data`; `crc`, the UPLOAD_CRC computed already (or None):
    not computed twice."""
    return UPLOAD_CRC.raw(crc) if crc is not None and kind == UPLOAD_CRC else kind.of(data)


def part_verdict(reply: dict, crc: Optional[int], data: bytes) -> Verdict:
    """The store's reply for a part (UploadPart, or ListParts' entry) against its bytes `data`;
    `crc`: the UPLOAD_CRC sent, None when checksums are off (what the store sends is computed)."""
    stored = stored_crc(reply)
    if stored is not None:
        kind, got = stored
        raw = bytes_checksum(kind, data, crc)
        want = kind.text(raw)
        why = f"was stored with {kind.algorithm} {got}, not that of its bytes ({want})"
        return Verdict(None if got == want else why, raw=raw)
    etag = _etag(reply)
    if not is_md5_etag(etag):
        return Verdict(f"was stored with ETag {etag} and no checksum: nothing to verify it with", retryable=False)
    digest = hashlib.md5(data).digest()
    if etag != digest.hex():
        return Verdict(f"was stored with ETag {etag}, not the md5 of its bytes ({digest.hex()})")
    return Verdict(None, md5=digest)


def _crc_judged(head: dict, multipart: bool, local: Callable[[Kind, bool], str]) -> tuple[Kind, str, str]:
    """(the stored checksum's kind, its text as a manifest writes it, the local one of the same
    form). A multipart object's is COMPOSITE (`-N`) unless the store says FULL_OBJECT or the kind
    has no composite form (CRC64NVME); a store that leaves the `-N` off (moto does) is read as
    composite and written with it, so a download knows the part count. `local(kind, composite)`
    computes the file's."""
    kind, got = stored_crc(head)  # type: ignore[misc]
    if not multipart or kind.full_only or head.get("ChecksumType") == "FULL_OBJECT":
        return kind, got, local(kind, False)
    mine = local(kind, True)
    if "-" not in got:
        got = f"{got}-{mine.rpartition('-')[2]}"
    return kind, got, mine


def object_checksum(key: str, head: dict, size: int, *, parts: int, crc: Callable[[Kind, bool], str],
                    etag: Callable[[], str]) -> str:
    """The verified checksum of a stored object (`kind:value`), from its HEAD. `parts`: how many
    it was sent in (0: one PUT); `crc(kind, composite)` gives the local CRC (`-N` when composite),
    `etag()` the local ETag: each is called only when the store answers with that kind.
    UploadError otherwise."""
    if head.get("ContentLength") != size:
        raise UploadError(f"{key}: stored {head.get('ContentLength')} bytes, the file has {size}", retryable=True)
    if stored_crc(head) is not None:
        kind, got, want = _crc_judged(head, parts > 0, crc)
        if got != want:
            raise UploadError(f"{key}: stored {kind.algorithm} {got} does not match the file ({want})", retryable=True)
        return f"{kind.kind}:{got}"
    got = _etag(head)
    if not is_md5_etag(got):
        raise UploadError(f"{key}: the store returned no checksum and an ETag that is no MD5 ({got}): "
                          f"the upload cannot be verified (is the store's checksum support turned off?)",
                          retryable=False)
    want = etag()
    if got != want:
        raise UploadError(f"{key}: stored ETag {got} does not match the file ({want})", retryable=True)
    return f"etag:{got}"


def _pieces(fd: int, size: int, part: int) -> Iterator[bytes]:
    for offset in range(0, size, part):
        yield os.pread(fd, min(part, size - offset), offset)


def local_etag(fd: int, size: int, part: int, *, multipart: bool) -> str:
    """The ETag S3 gives these bytes: md5 of the whole, or of the part md5s for a multipart upload."""
    if not multipart:
        md5 = hashlib.md5()
        for piece in _pieces(fd, size, PART):
            md5.update(piece)
        return md5.hexdigest()
    return combined_etag([hashlib.md5(piece).digest() for piece in _pieces(fd, size, part)])


def local_crc(fd: int, size: int, part: int, *, composite: bool, kind: Kind) -> str:
    """The file's checksum of `kind`: whole, or COMPOSITE over parts of `part` bytes."""
    if composite:
        return kind.composite([kind.of(piece) for piece in _pieces(fd, size, part)])
    return kind.text(kind.whole(_pieces(fd, size, PART)))


def matching_checksum(head: dict, fd: int, size: int, part: int, *, multipart: bool) -> Optional[str]:
    """The stored object's checksum (`kind:value`) when its size and checksum (else ETag) are
    those of the local bytes, sent whole or (`multipart`) in parts of `part` bytes, else None.
    The file is read only when the sizes and part counts agree."""
    if head.get("ContentLength") != size:
        return None
    count = -(-size // part)
    stored = stored_crc(head)
    if stored is not None:
        if multipart and "-" in stored[1] and stored[1].rpartition("-")[2] != str(count):
            return None  # another part size than the one recorded: not this upload
        kind, got, mine = _crc_judged(head, multipart,
                                      lambda k, composite: local_crc(fd, size, part, composite=composite, kind=k))
        return f"{kind.kind}:{got}" if got == mine else None
    got = _etag(head)
    if "-" in got and got.rpartition("-")[2] != str(count):
        return None
    return f"etag:{got}" if local_etag(fd, size, part, multipart="-" in got) == got else None


def _part_sizes(size: int, parts: int, base: int) -> Iterator[int]:
    """The part sizes that cut `size` bytes into `parts`: trainvisor's own first, then each
    whole-MiB size that does (a few at most). The part size is stored nowhere."""
    lowest = -(-size // max(parts, 1) // _MIB) or 1
    highest = (size - 1) // (parts - 1) // _MIB if parts > 1 else lowest
    own = part_size_for(size, base)
    for part in [own, *(p * _MIB for p in range(lowest, min(highest, lowest + 16) + 1) if p * _MIB != own)]:
        if -(-size // part) == parts:
            yield part


def file_checksum(path: str, kind: str, like: str, base: int = PART) -> str:
    """The value of checksum `kind` (etag, or a Kind's name) S3 gives this file when uploaded as
    the object whose value is `like` was: whole, or in N parts (the first part size that gives
    `like` wins, else the value under trainvisor's part size: a mismatch to report). A
    ValueError for a kind not known here."""
    crc = kind_named(kind)
    if crc is None and kind != "etag":
        raise ValueError(f"unknown checksum kind {kind!r}")
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        fd = f.fileno()

        def value(part: int, multipart: bool) -> str:
            if kind == "etag":
                return local_etag(fd, size, part, multipart=multipart)
            return local_crc(fd, size, part, composite=multipart, kind=crc)

        if "-" not in like:  # one PUT, or a FULL_OBJECT checksum: the part size does not matter
            return value(base, False)
        parts = int(like.rpartition("-")[2] or 0)
        for part in _part_sizes(size, parts, base):
            if value(part, True) == like:
                return like
        return value(part_size_for(size, base), True)


def file_etag(path: str, like: str, base: int = PART) -> str:
    """The ETag S3 gives this file when uploaded as the object whose ETag is `like` was."""
    return file_checksum(path, "etag", like, base)
