"""A downloaded file checked against the checksum a manifest recorded for its object.

Each store records the checksum it verified an upload with (`sha256:` for file://; `crc32c:` (or
`crc32:`) for S3 when the store returned a checksum, `etag:` when only its MD5 ETag; `qetag:` for
Kodo); the same function of the local bytes must give it back. The store's
module computes its own kind, imported only for a checksum of that kind.
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
    if kind in ("etag", "crc32", "crc32c"):
        from .s3_verify import file_checksum

        return f"{kind}:{file_checksum(path, kind, value)}"
    if kind == "qetag":
        from .kodo import qiniu_etag

        return f"qetag:{qiniu_etag(path)}"
    raise ValueError(f"unknown checksum kind {kind!r}")
