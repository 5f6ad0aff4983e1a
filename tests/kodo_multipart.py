"""The Kodo-protocol test server's resumable v2 uploads (init, parts, list, complete, abort), as a
mixin of `KodoServer` (kodo_server.py: tokens, the store, the other APIs): an upload's parts are
staged files until `complete` joins them in the order the client lists them."""
from __future__ import annotations

import hashlib
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .kodo_codec import KodoError, _b64

__all__ = ["ResumableV2"]


@dataclass
class _Upload:
    bucket: str
    key: str
    expires: float
    parts: dict[int, tuple[Path, str, int]] = field(default_factory=dict)  # n -> (file, etag, size)



class ResumableV2:
    """`init_upload`, `put_part`, `list_parts`, `complete`, `abort`; an unknown upload id: 612.
    Uses the server's `_lock`, `_uploads`, `check_up_token`, `_staging` and `store`."""

    def init_upload(self, token: str, bucket: str, key: Optional[str]) -> dict:
        self.check_up_token(token, bucket, key)
        upload_id = secrets.token_hex(16)
        expires = time.time() + 7 * 86400
        with self._lock:
            self._uploads[upload_id] = _Upload(bucket, key or "", expires)
        return {"uploadId": upload_id, "expireAt": int(expires)}

    def _upload(self, upload_id: str, bucket: str, key: Optional[str]) -> _Upload:
        with self._lock:
            up = self._uploads.get(upload_id)
        if up is None or up.bucket != bucket or up.key != (key or ""):
            raise KodoError(612, "no such uploadId")
        return up

    def put_part(self, token: str, bucket: str, key: Optional[str], upload_id: str, n: int, data: bytes,
                 content_md5: Optional[str]) -> dict:
        self.check_up_token(token, bucket, key)
        up = self._upload(upload_id, bucket, key)
        md5 = hashlib.md5(data).hexdigest()
        if content_md5 and content_md5 != md5:
            raise KodoError(400, "Content-MD5 mismatch")
        if not 1 <= n <= 10000:
            raise KodoError(400, "invalid partNumber")
        staged = self._staging()
        staged.write_bytes(data)
        etag = _b64(hashlib.sha1(data).digest())
        with self._lock:
            old = up.parts.get(n)
            up.parts[n] = (staged, etag, len(data))
        if old is not None:
            old[0].unlink(missing_ok=True)
        return {"etag": etag, "md5": md5}

    def list_parts(self, token: str, bucket: str, key: Optional[str], upload_id: str) -> dict:
        self.check_up_token(token, bucket, key)
        up = self._upload(upload_id, bucket, key)
        parts = [{"partNumber": n, "etag": e, "size": s} for n, (_, e, s) in sorted(up.parts.items())]
        return {"uploadId": upload_id, "expireAt": int(up.expires), "partNumberMarker": 0, "parts": parts}

    def complete(self, token: str, bucket: str, key: Optional[str], upload_id: str, body: dict) -> dict:
        _, scope_key, _ = self.check_up_token(token, bucket, key)
        up = self._upload(upload_id, bucket, key)
        listed = body.get("parts") or []
        numbers = [p.get("partNumber") for p in listed]
        if not listed or numbers != sorted(set(numbers)):
            raise KodoError(400, "parts must be given in ascending order without duplicates")
        staged = self._staging()
        with open(staged, "wb") as out:
            for p in listed:
                part = up.parts.get(p["partNumber"])
                if part is None or part[1] != p.get("etag"):
                    staged.unlink()
                    raise KodoError(400, f"part {p['partNumber']}: no such part or etag mismatch")
                with open(part[0], "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        reply = self.store(bucket, key or "", staged, may_overwrite=scope_key is not None)
        with self._lock:
            self._uploads.pop(upload_id, None)
        for path, _, _ in up.parts.values():
            path.unlink(missing_ok=True)
        return reply

    def abort(self, token: str, bucket: str, key: Optional[str], upload_id: str) -> dict:
        self.check_up_token(token, bucket, key)
        up = self._upload(upload_id, bucket, key)
        with self._lock:
            self._uploads.pop(upload_id, None)
        for path, _, _ in up.parts.values():
            path.unlink(missing_ok=True)
        return {}
