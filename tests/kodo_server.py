"""A Kodo-protocol server on 127.0.0.1, for driving the real `qiniu` SDK in tests.

Modelled (what the SDK sends and reads, strict where a client could get it wrong):
- upload tokens: `ak:urlsafe_b64(hmac_sha1(sk, enc)):enc`; unknown key or bad signature -> 401
  "bad token", past deadline -> 401 "expired token", unknown bucket -> 631, a `bucket:key` scope
  with another key -> 403; scope `bucket` alone is insert-only (614 "file exists" unless the
  content is the same), `bucket:key` may overwrite;
- form upload (`POST /`, multipart: token, key, crc32 checked when sent, file);
- resumable v1: `POST /mkblk/<size>` -> ctx, `POST /mkfile/<fsize>/key/<b64>/...` with the ctxs;
  an unknown ctx -> 701;
- resumable v2: init `POST /buckets/<b>/objects/<b64key>/uploads`, parts `PUT .../<id>/<n>`
  (Content-MD5 checked), list `GET .../<id>`, complete `POST .../<id>`, abort `DELETE .../<id>`;
  an unknown upload id -> 612;
- management (the rs host, same port): `POST /stat/<entry>`, `POST /delete/<entry>`, signed with
  the SDK's `Qiniu` MAC (method, path, Host, Content-Type, X-Qiniu-* headers, form body);
- listing (the rsf host, same port): `GET /list?bucket=&prefix=&marker=&limit=`, MAC-signed;
- private downloads: `GET /~dl/<bucket>/<key>?e=<deadline>&token=<ak>:<sign>` (`download_url(bucket)`
  is a bucket's download domain), the sign an HMAC-SHA1 of the URL up to `e=`; `Range: bytes=N-`
  answered 206; `bytes_sent` counts the object bytes sent;
- every reply carries `X-Reqid` (without it the SDK reports "server is not qiniu").

Not modelled: callbacks, persistent ops, regions/uc queries (a test that reached them fails),
other ranges than `bytes=N-`. The returned hash is always the qiniu etag
of the stored bytes; real Kodo returns a different hash for a v2 upload whose parts are not
4 MiB (trainvisor uses 4 MiB parts).

Faults for tests: `inject(method, path_regex, action, times)` (an HTTP status, or "drop": read
part of the body and close the connection without a reply, or for a download "cut": the reply
sent half way, then the connection closed), `down(seconds)` (every connection
is closed at once), `forget_uploads()` (the server loses every upload in progress).
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import signal
import sys
import threading
import time
import zlib
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Optional, Union

from .kodo_codec import KodoError, _b64, _unb64
from .kodo_multipart import ResumableV2, _Upload

__all__ = ["KodoServer"]

_BLOCK = 4 << 20


def qetag_of(path: Path) -> str:
    digests = []
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digests.append(hashlib.sha1(block).digest())
    if len(digests) <= 1:
        return _b64(b"\x16" + (digests[0] if digests else hashlib.sha1(b"").digest()))
    return _b64(b"\x96" + hashlib.sha1(b"".join(digests)).digest())


@dataclass
class _Fault:
    method: str
    pattern: "re.Pattern[str]"
    action: Union[int, str]
    times: int


@dataclass
class _Object:
    path: Path
    size: int
    hash: str
    put_time: int


class KodoServer(ResumableV2):
    """One access key, fixed buckets, objects stored as files under `root`."""

    def __init__(self, *, access_key: str, secret_key: str, buckets: list[str], root: Path) -> None:
        self.access_key, self._secret = access_key, secret_key.encode()
        self.buckets = set(buckets)
        self.root = Path(root)
        self._lock = threading.Lock()
        self._objects: dict[tuple[str, str], _Object] = {}
        self._writes: dict[tuple[str, str], int] = {}
        self._uploads: dict[str, _Upload] = {}
        self._blocks: dict[str, Path] = {}  # v1 ctx -> block file
        self._faults: list[_Fault] = []
        self._down_until = 0.0
        self.bytes_received = 0
        self.bytes_sent = 0
        self.requests: list[tuple[str, str, int]] = []
        self.token_lifetimes: list[float] = []  # seconds each upload token had left when it was checked
        self._httpd: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self.url = ""

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> "KodoServer":
        for sub in ("objects", "staging"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        from .kodo_http import _Handler, _Server  # the HTTP layer (its own module: this one is the store)

        handler = type("Handler", (_Handler,), {"kodo": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="kodo-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_connections()
        assert self._thread is not None
        self._thread.join(10)
        self._httpd = None

    def __enter__(self) -> "KodoServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what tests look at ----------------------------------------------------------------

    def object_path(self, bucket: str, key: str) -> Optional[Path]:
        with self._lock:
            obj = self._objects.get((bucket, key))
        return obj.path if obj else None

    def read_object(self, bucket: str, key: str) -> bytes:
        path = self.object_path(bucket, key)
        if path is None:
            raise KeyError(f"{bucket}:{key} is not stored")
        return path.read_bytes()

    def object_writes(self, bucket: str, key: str) -> int:
        """How many uploads stored this key (a delete does not undo the count)."""
        with self._lock:
            return self._writes.get((bucket, key), 0)

    def written_keys(self, bucket: str) -> list[str]:
        """Every key an upload ever stored, deleted since or not."""
        with self._lock:
            return sorted(k for b, k in self._writes if b == bucket)

    def keys(self, bucket: str) -> list[str]:
        with self._lock:
            return sorted(k for b, k in self._objects if b == bucket)

    def download_url(self, bucket: str) -> str:
        """The download domain of `bucket` (real buckets have one domain each)."""
        return f"{self.url}/~dl/{bucket}"

    # -- faults ----------------------------------------------------------------------------

    def inject(self, method: str, path_regex: str, action: Union[int, str], times: int = 1) -> None:
        """The next `times` requests matching method and path get `action` (a status or "drop")."""
        with self._lock:
            self._faults.append(_Fault(method.upper(), re.compile(path_regex), action, times))

    def down(self, seconds: float) -> None:
        """For `seconds`, every connection is closed without a reply."""
        self._down_until = time.monotonic() + seconds

    def up(self) -> None:
        """The outage `down` began ends now (a test need not wait it out)."""
        self._down_until = 0.0

    def forget_uploads(self) -> None:
        with self._lock:
            self._uploads.clear()
            self._blocks.clear()

    def _fault_for(self, method: str, path: str) -> Optional[Union[int, str]]:
        with self._lock:
            for f in self._faults:
                if f.times > 0 and f.method == method and f.pattern.search(path):
                    f.times -= 1
                    return f.action
        return None

    # -- protocol --------------------------------------------------------------------------

    def check_up_token(self, token: str, bucket: Optional[str], key: Optional[str]) -> tuple[str, Optional[str], dict]:
        """(bucket, key the token allows or None, policy); raises KodoError."""
        parts = token.split(":")
        if len(parts) != 3:
            raise KodoError(401, "bad token")
        ak, sign, enc = parts
        want = _b64(hmac.new(self._secret, enc.encode(), hashlib.sha1).digest())
        if ak != self.access_key or not hmac.compare_digest(sign, want):
            raise KodoError(401, "bad token")
        try:
            policy = json.loads(_unb64(enc))
        except ValueError:
            raise KodoError(401, "bad token") from None
        with self._lock:
            self.token_lifetimes.append(int(policy.get("deadline", 0)) - time.time())
        if int(policy.get("deadline", 0)) < time.time():
            raise KodoError(401, "expired token")
        scope = str(policy.get("scope", ""))
        scope_bucket, _, scope_key = scope.partition(":")
        if scope_bucket not in self.buckets:
            raise KodoError(631, "no such bucket")
        if bucket is not None and bucket != scope_bucket:
            raise KodoError(403, "bucket doesn't match with scope")
        if scope_key and key is not None and key != scope_key:
            raise KodoError(403, "key doesn't match with scope")
        return scope_bucket, (scope_key or None), policy

    def check_mac(self, method: str, path_with_query: str, headers, body: bytes) -> None:
        auth = headers.get("Authorization", "")
        if not auth.startswith("Qiniu "):
            raise KodoError(401, "bad token")
        ak, _, sign = auth[len("Qiniu "):].partition(":")
        data = f"{method} {path_with_query}\nHost: {headers.get('Host', '')}"
        ctype = headers.get("Content-Type")
        if ctype:
            data += f"\nContent-Type: {ctype}"
        qheaders = sorted((_canonical(k), v) for k, v in headers.items()
                          if k.lower().startswith("x-qiniu-") and len(k) > len("x-qiniu-"))
        if qheaders:
            data += "\n" + "\n".join(f"{k}: {v}" for k, v in qheaders)
        data += "\n\n"
        if ctype and ctype != "application/octet-stream" and body:
            data += body.decode()
        want = _b64(hmac.new(self._secret, data.encode(), hashlib.sha1).digest())
        if ak != self.access_key or not hmac.compare_digest(sign, want):
            raise KodoError(401, "bad token")

    def _staging(self) -> Path:
        return self.root / "staging" / secrets.token_hex(8)

    def store(self, bucket: str, key: str, staged: Path, *, may_overwrite: bool) -> dict:
        """Move a fully received file into place as `bucket:key`; the reply Kodo gives."""
        digest = qetag_of(staged)
        with self._lock:
            old = self._objects.get((bucket, key))
            if old is not None and not may_overwrite and old.hash != digest:
                staged.unlink()
                raise KodoError(614, "file exists")
            target = self.root / "objects" / bucket / hashlib.sha1(key.encode()).hexdigest()
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, target)
            self._objects[(bucket, key)] = _Object(target, target.stat().st_size, digest, time.time_ns() // 100)
            self._writes[(bucket, key)] = self._writes.get((bucket, key), 0) + 1
        return {"hash": digest, "key": key}

    def form_upload(self, fields: dict[str, bytes], file_data: Optional[bytes]) -> dict:
        token = fields.get("token", b"").decode()
        key = fields["key"].decode() if "key" in fields else None
        bucket, scope_key, _ = self.check_up_token(token, None, key)
        if file_data is None:
            raise KodoError(400, "file is missing")
        key = key if key is not None else (scope_key or "")
        if "crc32" in fields and int(fields["crc32"]) != zlib.crc32(file_data) & 0xFFFFFFFF:
            raise KodoError(406, "crc32 not match")
        staged = self._staging()
        staged.write_bytes(file_data)
        return self.store(bucket, key, staged, may_overwrite=scope_key is not None)

    def mkblk(self, token: str, size: int, data: bytes) -> dict:
        self.check_up_token(token, None, None)
        if len(data) != size:
            raise KodoError(400, "block size mismatch")
        staged = self._staging()
        staged.write_bytes(data)
        ctx = secrets.token_urlsafe(24)
        with self._lock:
            self._blocks[ctx] = staged
        return {"ctx": ctx, "checksum": _b64(hashlib.sha1(data).digest()), "crc32": zlib.crc32(data) & 0xFFFFFFFF,
                "offset": len(data), "host": "", "expired_at": int(time.time()) + 7 * 86400}

    def mkfile(self, token: str, fsize: int, key: Optional[str], ctxs: list[str]) -> dict:
        bucket, scope_key, _ = self.check_up_token(token, None, key)
        with self._lock:
            blocks = [self._blocks.get(c) for c in ctxs]
        if any(b is None for b in blocks):
            raise KodoError(701, "invalid ctx: block does not exist or expired")
        staged = self._staging()
        with open(staged, "wb") as out:
            for b in blocks:
                with open(b, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 20)
        if staged.stat().st_size != fsize:
            staged.unlink()
            raise KodoError(400, "file size mismatch")
        return self.store(bucket, key if key is not None else (scope_key or ""), staged,
                          may_overwrite=scope_key is not None)

    def manage(self, op: str, entry: str) -> dict:
        bucket, _, key = _unb64(entry).decode().partition(":")
        if bucket not in self.buckets:
            raise KodoError(631, "no such bucket")
        with self._lock:
            obj = self._objects.get((bucket, key))
            if obj is None:
                raise KodoError(612, "no such file or directory")
            if op == "delete":
                del self._objects[(bucket, key)]
        if op == "delete":
            obj.path.unlink(missing_ok=True)
            return {}
        return {"fsize": obj.size, "hash": obj.hash, "mimeType": "application/octet-stream",
                "putTime": obj.put_time, "type": 0}


    def list_objects(self, query: dict[str, str]) -> dict:
        bucket, prefix = query.get("bucket", ""), query.get("prefix", "")
        if bucket not in self.buckets:
            raise KodoError(631, "no such bucket")
        limit, marker = int(query.get("limit") or 1000), query.get("marker", "")
        with self._lock:
            found = sorted((k, o) for (b, k), o in self._objects.items()
                           if b == bucket and k.startswith(prefix) and k > marker)
        page = found[:limit]
        items = [{"key": k, "fsize": o.size, "hash": o.hash, "putTime": o.put_time,
                  "mimeType": "application/octet-stream", "type": 0} for k, o in page]
        return {"items": items, "marker": page[-1][0] if len(found) > limit else ""}

    def check_download(self, url: str) -> None:
        """A private download URL: `...?e=<deadline>&token=<ak>:<hmac of the URL before &token>`."""
        signed, _, token = url.rpartition("&token=")
        ak, _, sign = token.partition(":")
        want = _b64(hmac.new(self._secret, signed.encode(), hashlib.sha1).digest())
        if ak != self.access_key or not hmac.compare_digest(sign, want):
            raise KodoError(401, "bad token")
        if int(signed.rpartition("e=")[2] or 0) < time.time():
            raise KodoError(401, "token out of date")


def _canonical(name: str) -> str:
    return "-".join(p[:1].upper() + p[1:].lower() for p in name.split("-"))


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--access-key", required=True)
    ap.add_argument("--secret-key", required=True)
    ap.add_argument("--bucket", action="append", required=True)
    ap.add_argument("--root", required=True)
    a = ap.parse_args(argv)
    server = KodoServer(access_key=a.access_key, secret_key=a.secret_key, buckets=a.bucket, root=Path(a.root))
    server.start()
    print(server.url, flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
