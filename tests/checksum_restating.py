"""A store that keeps another checksum than the one the client asked for, played by the fault
proxy in front of moto: an S3-compatible gateway that checksums again, or AWS S3's default
CRC64NVME. moto checksums only what it is asked for (and without the CRT library turns a
CRC64NVME into a CRC32), so the proxy computes the one it restates from the bytes the store
received (after any byte the proxy flipped on the way) and puts it in the reply in place of the
store's: each part's (UploadPart), each small object's (PutObject), and a multipart object's
(HEAD, GET with checksum mode): COMPOSITE (that of the parts', `-N`) or FULL_OBJECT (the
store's bytes read back). SHA256 by hashlib; CRC64NVME by trainvisor's module, whose values
tests/uploaders/test_crc64nvme.py holds to published vectors."""
from __future__ import annotations

import base64
import hashlib
import http.client
import threading
import urllib.parse
from typing import Optional

__all__ = ["Restater"]


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


class Restater:
    """What the replies say instead: `headers(...)` gives a reply's headers restated, or None
    (left as the store sent them)."""

    def __init__(self, algorithm: str, full_object: bool, upstream: tuple[str, int]) -> None:
        self.algorithm = algorithm.upper()
        if self.algorithm not in ("SHA256", "CRC64NVME"):
            raise ValueError(f"cannot restate {algorithm}")
        self.full = full_object or self.algorithm == "CRC64NVME"
        self.upstream = upstream
        self._lock = threading.Lock()
        self._parts: dict[tuple[str, str], dict[int, bytes]] = {}  # (path, upload id) -> number -> raw
        self._objects: dict[str, list[bytes]] = {}  # path -> its completed upload's part checksums ([]: one PUT)

    def digest(self, data: bytes) -> bytes:
        if self.algorithm == "SHA256":
            return hashlib.sha256(data).digest()
        from trainvisor.uploaders.crc64nvme import crc64nvme

        return crc64nvme(data).to_bytes(8, "big")

    def headers(self, method: str, target: str, asked, body: bytes,
                resp: http.client.HTTPResponse) -> Optional[list[tuple[str, str]]]:
        path, _, query = target.partition("?")
        q = urllib.parse.parse_qs(query, keep_blank_values=True)
        if resp.status != 200:
            return None
        if method == "PUT" and "partNumber" in q and "uploadId" in q:
            raw = self.digest(body)
            with self._lock:
                self._parts.setdefault((path, q["uploadId"][0]), {})[int(q["partNumber"][0])] = raw
            return self._with(resp, _b64(raw), None)
        if method == "PUT" and not query and not asked.get("x-amz-copy-source"):
            with self._lock:
                self._objects[path] = []
            return self._with(resp, _b64(self.digest(body)), None)
        if method == "POST" and "uploadId" in q:
            with self._lock:
                parts = self._parts.pop((path, q["uploadId"][0]), {})
                self._objects[path] = [parts[n] for n in sorted(parts)]
            return None
        if method in ("HEAD", "GET") and not query and asked.get("x-amz-checksum-mode") == "ENABLED":
            with self._lock:
                parts = self._objects.get(path)
            if parts is None or asked.get("Range"):
                return None  # not seen stored here; a ranged GET carries no checksum
            if self.full or not parts:
                return self._with(resp, _b64(self.digest(self._stored_bytes(path))), "FULL_OBJECT")
            return self._with(resp, f"{_b64(self.digest(b''.join(parts)))}-{len(parts)}", "COMPOSITE")
        return None

    def _stored_bytes(self, path: str) -> bytes:
        """The object as the store holds it, asked of the store itself (signed: moto refuses an
        anonymous GET)."""
        import boto3

        bucket, _, key = urllib.parse.unquote(path).lstrip("/").partition("/")
        s3 = boto3.client("s3", endpoint_url="http://%s:%d" % self.upstream, aws_access_key_id="test",
                          aws_secret_access_key="test", region_name="us-east-1")
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()

    def _with(self, resp: http.client.HTTPResponse, value: str, kind: Optional[str]) -> list[tuple[str, str]]:
        kept = [(k, v) for k, v in resp.getheaders() if not k.lower().startswith("x-amz-checksum-")]
        extra = [("x-amz-checksum-type", kind)] if kind else []
        return kept + [(f"x-amz-checksum-{self.algorithm.lower()}", value)] + extra
