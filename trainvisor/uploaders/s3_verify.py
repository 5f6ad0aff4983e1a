"""What an S3 store says it holds, checked against the local bytes: its checksum when it returns
one, its MD5 ETag otherwise.

An upload asks for CRC32: each part's (or the whole small object's) CRC32 is computed once, while
its bytes are in memory to be sent, and sent with them (x-amz-checksum-crc32), so the store checks
what it received and refuses a part damaged on the way. The reply and the object's HEAD
(ChecksumMode=ENABLED) say what the store holds: a part's CRC32; a multipart object's CRC32 as
COMPOSITE (the CRC32 of the parts' raw CRC32s, `-N`) or as FULL_OBJECT (the whole file's). A CRC32
costs a fraction of an MD5, and SSE-KMS buckets and S3-compatible stores (MinIO with encryption,
Ceph, R2) return ETags that are no MD5 at all: so the ETag is compared only when no checksum comes
back, and only then is an MD5 computed. A store that returns neither cannot be verified: that is
said once, not retried for ever.

A manifest records which one was verified: `crc32:<base64>[-N]` or `etag:<md5>[-N]`; `trainvisor
download` computes the same from the received file (`file_checksum`).
"""
from __future__ import annotations

import base64
import hashlib
import os
import re
import zlib
from typing import Callable, Iterator, NamedTuple, Optional

from .base import UploadError

__all__ = ["PART", "crc32_text", "composite_crc32", "is_md5_etag", "Verdict", "part_verdict", "object_checksum",
           "matching_checksum", "file_checksum", "file_etag", "combined_etag", "local_etag", "local_crc", "part_size_for"]

PART = 8 << 20
_MAX_PARTS = 10_000  # S3's limit on parts per upload
_MIB = 1 << 20
_MD5_ETAG = re.compile(r"[0-9a-f]{32}(-\d+)?")
# The local function of each checksum kind a manifest may name (crc32c only when its module is there).
_CRCS: dict[str, Callable[[], Callable[[bytes, int], int]]] = {
    "crc32": lambda: zlib.crc32,
    "crc32c": lambda: __import__("crc32c").crc32c,
}


def part_size_for(size: int, base: int = PART) -> int:
    """`base`, grown in whole MiB when the file would need more than 10,000 parts."""
    need = -(-size // _MAX_PARTS)
    return max(base, -(-need // _MIB) << 20)


def crc32_text(crc: int) -> str:
    """A CRC32 as S3 writes it: base64 of its 4 big-endian bytes."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def composite_crc32(crcs: list[int], fn: Callable[[bytes, int], int] = zlib.crc32) -> str:
    """A multipart object's COMPOSITE checksum: the CRC of the parts' raw CRCs, `-N`."""
    raw = b"".join(c.to_bytes(4, "big") for c in crcs)
    return f"{crc32_text(fn(raw, 0))}-{len(crcs)}"


def is_md5_etag(etag: str) -> bool:
    """Whether an ETag can be an MD5 (of the bytes, or of the part MD5s with `-N`)."""
    return bool(_MD5_ETAG.fullmatch(etag))


def combined_etag(digests: list[bytes]) -> str:
    return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"


def _etag(reply: dict) -> str:
    return str(reply.get("ETag", "")).strip('"')


class Verdict(NamedTuple):
    """A part's reply judged: `why` it does not match the bytes (None: it does), whether trying
    again can help, and the part's md5 when the ETag was what could be compared."""

    why: Optional[str]
    retryable: bool = True
    md5: Optional[bytes] = None


def part_verdict(reply: dict, crc: Optional[int], data: bytes) -> Verdict:
    """The store's reply for a part (UploadPart, or ListParts' entry) against its bytes `data`;
    `crc`: the CRC32 sent, None when checksums are off (computed here if the store sends one)."""
    got = reply.get("ChecksumCRC32")
    if got:
        want = crc32_text(zlib.crc32(data) if crc is None else crc)
        return Verdict(None if got == want else f"was stored with CRC32 {got}, not that of its bytes ({want})")
    etag = _etag(reply)
    if not is_md5_etag(etag):
        return Verdict(f"was stored with ETag {etag} and no checksum: nothing to verify it with", retryable=False)
    digest = hashlib.md5(data).digest()
    if etag != digest.hex():
        return Verdict(f"was stored with ETag {etag}, not the md5 of its bytes ({digest.hex()})")
    return Verdict(None, md5=digest)


def _crc_judged(head: dict, multipart: bool, composite: Callable[[], str], full: Callable[[], str]) -> tuple[str, str]:
    """(the stored CRC32 as a manifest writes it, the local one of the same form). A multipart
    object's is COMPOSITE (`-N`) unless the store says FULL_OBJECT; a store that leaves the `-N`
    off (moto does) is read as composite, written with it, so a download knows the part count."""
    got = str(head["ChecksumCRC32"])
    if not multipart or head.get("ChecksumType") == "FULL_OBJECT":
        return got, full()
    mine = composite()
    if "-" not in got:
        got = f"{got}-{mine.rpartition('-')[2]}"
    return got, mine


def object_checksum(key: str, head: dict, size: int, *, parts: int, crc: Callable[[bool], str],
                    etag: Callable[[], str]) -> str:
    """The verified checksum of a stored object (`kind:value`), from its HEAD. `parts`: how many
    it was sent in (0: one PUT); `crc(composite)` gives the local CRC32 (`-N` when composite),
    `etag()` the local ETag: each is called only when the store answers with that kind.
    UploadError otherwise."""
    if head.get("ContentLength") != size:
        raise UploadError(f"{key}: stored {head.get('ContentLength')} bytes, the file has {size}", retryable=True)
    if head.get("ChecksumCRC32"):
        got, want = _crc_judged(head, parts > 0, lambda: crc(True), lambda: crc(False))
        if got != want:
            raise UploadError(f"{key}: stored CRC32 {got} does not match the file ({want})", retryable=True)
        return f"crc32:{got}"
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


def local_crc(fd: int, size: int, part: int, *, composite: bool, kind: str = "crc32") -> str:
    fn = _CRCS[kind]()
    if composite:
        return composite_crc32([fn(piece, 0) for piece in _pieces(fd, size, part)], fn)
    crc = 0
    for piece in _pieces(fd, size, PART):
        crc = fn(piece, crc)
    return crc32_text(crc)


def matching_checksum(head: dict, fd: int, size: int, part: int, *, multipart: bool) -> Optional[str]:
    """The stored object's checksum (`kind:value`) when its size and checksum (else ETag) are
    those of the local bytes, sent whole or (`multipart`) in parts of `part` bytes, else None.
    The file is read only when the sizes and part counts agree."""
    if head.get("ContentLength") != size:
        return None
    count = -(-size // part)
    if head.get("ChecksumCRC32"):
        stated = str(head["ChecksumCRC32"])
        if multipart and "-" in stated and stated.rpartition("-")[2] != str(count):
            return None  # another part size than the one recorded: not this upload
        got, mine = _crc_judged(head, multipart, lambda: local_crc(fd, size, part, composite=True),
                                lambda: local_crc(fd, size, part, composite=False))
        return f"crc32:{got}" if got == mine else None
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
    """The value of checksum `kind` (etag, crc32, crc32c) S3 gives this file when uploaded as
    the object whose value is `like` was: whole, or in N parts (the first part size that gives
    `like` wins, else the value under trainvisor's part size: a mismatch to report)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        fd = f.fileno()

        def value(part: int, multipart: bool) -> str:
            if kind == "etag":
                return local_etag(fd, size, part, multipart=multipart)
            return local_crc(fd, size, part, composite=multipart, kind=kind)

        if "-" not in like:
            return value(base, False)
        parts = int(like.rpartition("-")[2] or 0)
        for part in _part_sizes(size, parts, base):
            if value(part, True) == like:
                return like
        return value(part_size_for(size, base), True)


def file_etag(path: str, like: str, base: int = PART) -> str:
    """The ETag S3 gives this file when uploaded as the object whose ETag is `like` was."""
    return file_checksum(path, "etag", like, base)
