"""A downloaded file checked against the checksum a manifest recorded for its object.

Each store records the checksum it verified an upload with (`sha256:<hex>` for file://; for S3
the kind the store returned: `crc32c:`, `crc32:`, `crc64nvme:`, `s3-sha256:` (base64, `-N` when
composite; not file://'s `sha256:`), `etag:` when only its MD5 ETag; `qetag:` for Kodo); the
same function of the local bytes must give it back. The store's module computes its own kind,
imported only for a checksum of that kind.
"""
from __future__ import annotations

__all__ = ["checksum_like"]


def checksum_like(path: str, recorded: str) -> str:
    """The checksum of the file at `path`, of the kind `recorded` is, written as it is
    (`kind:value`); a ValueError for a kind no store here writes."""
    kind, _, value = recorded.partition(":")
    if kind == "sha256":
        from .local import file_sha256
        from pathlib import Path

        return f"sha256:{file_sha256(Path(path))}"
    if kind in ("etag", "crc32", "crc32c", "crc64nvme", "s3-sha256"):
        from .s3_verify import file_checksum

        return f"{kind}:{file_checksum(path, kind, value)}"
    if kind == "qetag":
        from .kodo import qiniu_etag

        return f"qetag:{qiniu_etag(path)}"
    raise ValueError(f"unknown checksum kind {kind!r}")
