"""The checksums an S3 store may say it holds (x-amz-checksum-*), one `Kind` each: its name in a
manifest, in a request, in a reply; how bytes give it; how a multipart object's is made of its
parts'.

CRC32C (the `crc32c` module: the CPU's own instruction) is what uploads ask for; CRC32 is what
boto3 asks for; CRC64NVME is what AWS S3 stores for an object written without a checksum (and
S3-compatible gateways that checksum again); SHA256 is what a client asked for with
ChecksumAlgorithm='SHA256'. A multipart object's checksum is COMPOSITE (the checksum of the
parts' raw checksums, `-N`) or FULL_OBJECT (the whole file's); CRC64NVME is FULL_OBJECT only.
A FULL_OBJECT CRC64NVME is combined from the parts' CRCs (crc64nvme.combine) when every part
was verified with one: the file is not read again.

Manifest names cannot be confused with another store's: file:// writes `sha256:<hex>` for a
whole file, so S3's SHA256 (base64, maybe composite) is `s3-sha256:<base64>[-N]`.
"""
from __future__ import annotations

import base64
import hashlib
import zlib
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from . import crc64nvme

__all__ = ["Kind", "KINDS", "UPLOAD_CRC", "kind_named"]


@dataclass(frozen=True)
class Kind:
    """One checksum S3 knows. `fn(data, crc)` continues a CRC (None: SHA256, by hashlib);
    `combine(crc1, crc2, len2)` joins two CRCs when it is known here; `full_only`: never composite."""

    kind: str
    algorithm: str
    field: str
    width: int
    fn: Optional[Callable[[bytes, int], int]] = None
    combine: Optional[Callable[[int, int, int], int]] = None
    full_only: bool = False

    def raw(self, crc: int) -> bytes:
        """A CRC as the bytes S3 keeps (big-endian)."""
        return crc.to_bytes(self.width, "big")

    def of(self, data: bytes) -> bytes:
        """The raw checksum of `data`."""
        return self.raw(self.fn(data, 0)) if self.fn is not None else hashlib.sha256(data).digest()

    def whole(self, pieces: Iterable[bytes]) -> bytes:
        """The raw checksum of the pieces one after the other."""
        if self.fn is None:
            sha = hashlib.sha256()
            for piece in pieces:
                sha.update(piece)
            return sha.digest()
        crc = 0
        for piece in pieces:
            crc = self.fn(piece, crc)
        return self.raw(crc)

    @staticmethod
    def text(raw: bytes) -> str:
        """As S3 writes it: base64 of the raw bytes."""
        return base64.b64encode(raw).decode()

    def composite(self, raws: list[bytes]) -> str:
        """A multipart object's COMPOSITE checksum: that of the parts' raw checksums, `-N`."""
        return f"{self.text(self.of(b''.join(raws)))}-{len(raws)}"

    def joined(self, parts: list[tuple[bytes, int]]) -> Optional[str]:
        """The FULL_OBJECT checksum from the parts' raw CRCs and lengths, when they can be
        combined here (None: the file must be read)."""
        if self.combine is None or not parts:
            return None
        crc = int.from_bytes(parts[0][0], "big")
        for raw, length in parts[1:]:
            crc = self.combine(crc, int.from_bytes(raw, "big"), length)
        return self.text(self.raw(crc))


def _crc32c() -> Optional[Kind]:
    try:
        from crc32c import crc32c
    except ImportError:
        return None
    return Kind("crc32c", "CRC32C", "ChecksumCRC32C", 4, crc32c)


KINDS = tuple(k for k in (
    _crc32c(),
    Kind("crc32", "CRC32", "ChecksumCRC32", 4, zlib.crc32),
    Kind("crc64nvme", "CRC64NVME", "ChecksumCRC64NVME", 8, crc64nvme.crc64nvme, crc64nvme.combine, full_only=True),
    Kind("s3-sha256", "SHA256", "ChecksumSHA256", 32),
) if k is not None)
UPLOAD_CRC = KINDS[0]
"""The CRC uploads ask for: the cheapest one there is here (CRC32C, else CRC32)."""


def kind_named(name: str) -> Optional[Kind]:
    """The kind a manifest names (`crc32c`, `crc64nvme`, `s3-sha256`...), or None."""
    return next((k for k in KINDS if k.kind == name), None)
