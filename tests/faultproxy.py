"""An HTTP reverse proxy on 127.0.0.1 that injects faults between a client and a real server
(moto's S3 server in the tests): a status for the next matching requests, a connection dropped
halfway through a request body, a byte of a request body flipped on the way, or the whole store
down for a while. It can also play stores moto does not: one whose ETags are no MD5 (SSE-KMS,
MinIO with encryption, Ceph, R2: `rewrite_etags`), one that keeps another checksum than the one
the client asked for (a gateway that checksums again, AWS's default CRC64NVME: `restate_checksums`,
tests/checksum_restating.py), and credentials scoped to a prefix (every key outside it refused
with 403 AccessDenied: `scope`).

Requests and replies are forwarded unchanged (bodies streamed in 1 MiB pieces, keep-alive on
both sides), so the client's signatures stay valid.
"""
from __future__ import annotations

import http.client
import re
import urllib.parse
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import NamedTuple, Optional, Union
from urllib.parse import urlsplit

from .checksum_restating import Restater
from .http_servers import TrackingServer

__all__ = ["FaultProxy", "HoldReply"]

_PART_NUMBER = re.compile(r"(?:^|&)partNumber=(\d+)")
_ETAG_XML = re.compile(rb"<ETag>(?:&quot;|\")?([^<&\"]*)(?:&quot;|\")?</ETag>")
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade"}


class HoldReply(NamedTuple):
    """A fault action: the request reaches the store (which acts on it), then its reply is held
    `seconds` (or until the proxy stops) before the client gets it: a reply lost to a kill."""

    seconds: float


@dataclass
class _Fault:
    method: str
    path: "re.Pattern[str]"
    query: "Optional[re.Pattern[str]]"
    action: Union[int, float, str, HoldReply]
    times: int


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._down_until = 0.0
        self._down_trigger: Optional[tuple[str, "re.Pattern[str]", float]] = None
        self.went_down = self.came_back = 0.0
        self._stopping = threading.Event()  # ends every HoldReply at stop()
        self.requests: list[tuple[str, str, str, int]] = []  # method, path, query, status (-1: dropped)
        self.arrived = 0  # requests that reached the proxy (a held one is logged only when it ends)
        self.holding = 0  # holds begun: a held request's, or a reply's once the store has acted
        self._nth: dict[int, Union[float, HoldReply]] = {}
        self._etags_rewritten = False
        self._etag_originals: dict[str, str] = {}  # a rewritten ETag -> the store's own
        self._scope: Optional[tuple[str, str]] = None  # (bucket, prefix) the credentials may touch
        self._restater: Optional[Restater] = None
        self._httpd: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None
        self.url = ""

    def start(self) -> "FaultProxy":
        self._stopping.clear()
        handler = type("Handler", (_Handler,), {"proxy": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_connections()
        assert self._thread is not None
        self._thread.join(10)
        self._httpd = None

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def inject(self, method: str, path_regex: str, action: Union[int, float, str, HoldReply], times: int = 1,
               query_regex: Optional[str] = None) -> None:
        """The next `times` matching requests get `action`: a status (an int: S3-style XML error,
        after the body was read), "drop" (half the body read, then the connection closed), "flip"
        (the middle byte of the body inverted, then forwarded: damage on the way), a
        hold (a float: the whole body read, then held that many seconds before it is forwarded),
        or HoldReply (forwarded at once, the store's reply held)."""
        with self._lock:
            self._faults.append(_Fault(method.upper(), re.compile(path_regex),
                                       re.compile(query_regex) if query_regex else None, action, times))

    def inject_nth(self, n: int, action: Union[float, HoldReply]) -> None:
        """The `n`-th request to arrive (from 1, whatever it is) gets `action`: a hold (a float:
        the store does not see it meanwhile) or HoldReply (the store acts, the client never hears).
        A kill at a chosen moment of a client's sequence of requests, not after a guessed sleep."""
        with self._lock:
            self._nth[n] = action

    def rewrite_etags(self) -> None:
        """From now on every ETag the store returns (headers, and the <ETag> of XML bodies) is
        replaced by one that is no MD5, the same for the same value, as an SSE-KMS bucket's. The
        client's requests that name one (CompleteMultipartUpload) reach the store with its own."""
        self._etags_rewritten = True

    def _rewritten(self, etag: str) -> str:
        value, dash, parts = etag.partition("-")
        new = f"kms{value[::-1][:29]}{dash}{parts}"
        with self._lock:
            self._etag_originals[new] = etag
        return new

    def _restore_etags(self, body: bytes) -> bytes:
        with self._lock:
            known = dict(self._etag_originals)
        return _ETAG_XML.sub(lambda m: b"<ETag>\"" + known.get(m.group(1).decode(), m.group(1).decode()).encode()
                             + b"\"</ETag>", body)

    def restate_checksums(self, algorithm: str, *, full_object: bool = False) -> None:
        """From now on the store's replies carry x-amz-checksum-<algorithm> (SHA256 or CRC64NVME)
        of the bytes it received, in place of the checksum it returns: each part's and small
        object's, and a multipart object's (HEAD) COMPOSITE, or FULL_OBJECT when `full_object`
        or the algorithm has no composite form (CRC64NVME)."""
        self._restater = Restater(algorithm, full_object, self.upstream)

    def scope(self, bucket: str, prefix: str) -> None:
        """From now on only keys of `bucket` under `prefix` (and listings asking for a prefix
        under it) are let through; every other request gets 403 AccessDenied, as from
        credentials scoped to the prefix."""
        self._scope = (bucket, prefix)

    def _allowed(self, path: str, query: str) -> bool:
        if self._scope is None:
            return True
        bucket, prefix = self._scope
        key = urllib.parse.unquote(path).lstrip("/").partition("/")
        if key[0] != bucket:
            return False
        if key[2]:
            return key[2].startswith(prefix)
        asked = urllib.parse.parse_qs(query).get("prefix", [""])[0]
        return asked.startswith(prefix)

    def clear_faults(self) -> None:
        """Forget the faults not yet used."""
        with self._lock:
            self._faults.clear()

    def down(self, seconds: float) -> None:
        """For `seconds`, every request's connection is closed without a reply."""
        self._down_until = time.monotonic() + seconds

    def down_from(self, method: str, path_regex: str, seconds: float) -> None:
        """The store goes down for `seconds` at the first `method` request whose path matches
        (that one is refused too): an outage that begins once the client has started (after
        its preflight). `went_down`/`came_back`: when (time.time(), as the journal records)."""
        self._down_trigger = (method, re.compile(path_regex), seconds)

    def _maybe_go_down(self, method: str, path: str) -> None:
        trigger = self._down_trigger
        if trigger is not None and trigger[0] == method and trigger[1].search(path):
            self._down_trigger = None
            self._down_until = time.monotonic() + trigger[2]
            self.went_down = time.time()
            self.came_back = self.went_down + trigger[2]

    def count(self, method: str, query_regex: str = "", status: Optional[int] = None) -> int:
        q = re.compile(query_regex)
        with self._lock:
            return sum(1 for m, _, query, s in self.requests
                       if m == method and q.search(query) and (status is None or s == status))

    def accepted_parts(self, since: int = 0) -> list[int]:
        """Part numbers of the multipart PUTs the store accepted (200), from request `since` on."""
        with self._lock:
            found = [_PART_NUMBER.search(query) for m, _, query, s in self.requests[since:]
                     if m == "PUT" and s == 200]
        return [int(f.group(1)) for f in found if f]

    def _fault_for(self, method: str, path: str, query: str) -> Optional[Union[int, float, str]]:
        with self._lock:
            self.arrived += 1
            if self.arrived in self._nth:
                return self._nth.pop(self.arrived)
            for f in self._faults:
                if f.times > 0 and f.method == method and f.path.search(path) and (
                        f.query is None or f.query.search(query)):
                    f.times -= 1
                    return f.action
        return None

    def _holding(self) -> None:
        with self._lock:
            self.holding += 1

    def _log(self, method: str, target: str, status: int) -> None:
        path, _, query = target.partition("?")
        with self._lock:
            self.requests.append((method, path, query, status))


_Server = TrackingServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    proxy: FaultProxy
    _upstream: Optional[http.client.HTTPConnection] = None

    def log_message(self, fmt, *args) -> None:
        pass

    def finish(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
        super().finish()

    def _hang_up(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read_body(self) -> Optional[bytes]:
        """The whole request body, or None when the client hung up before sending all of it
        (a killed uploader): a cut body must never reach the store as if it were complete."""
        try:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = bytearray()
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunk = self.rfile.read(size)
                    if len(chunk) != size:
                        return None
                    out += chunk
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(size)
            return body if len(body) == size else None
        except (ConnectionError, ValueError):
            return None

    def _forward(self) -> None:
        p = self.proxy
        with p._lock:
            p._maybe_go_down(self.command, self.path.partition("?")[0])
        if time.monotonic() < p._down_until:
            p._log(self.command, self.path, -1)
            return self._hang_up()
        path, _, query = self.path.partition("?")
        fault = p._fault_for(self.command, path, query)
        if fault == "drop":
            self.rfile.read(int(self.headers.get("Content-Length") or 0) // 2)
            p._log(self.command, self.path, -1)
            return self._hang_up()
        body = self._read_body()
        if body is None:
            p._log(self.command, self.path, -1)
            return self._hang_up()
        if not p._allowed(path, query):
            return self._refuse(403, "AccessDenied")
        if isinstance(fault, float):
            p._holding()
            p._stopping.wait(fault)  # a slow link: the request is in flight that long (or until stop)
        elif isinstance(fault, int):
            return self._refuse(fault, "ServiceUnavailable" if fault == 503 else "InternalError")
        elif fault == "flip" and body:
            middle = len(body) // 2
            body = body[:middle] + bytes([body[middle] ^ 0xFF]) + body[middle + 1:]
        if p._etags_rewritten and self.command == "POST" and b"<ETag>" in body:
            body = p._restore_etags(body)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        if body or self.command in ("PUT", "POST"):
            headers["Content-Length"] = str(len(body))
        for attempt in (0, 1):  # a kept-alive upstream connection may have been closed meanwhile
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(*p.upstream, timeout=120)
            try:
                self._upstream.request(self.command, self.path, body=body, headers=headers)
                resp = self._upstream.getresponse()
                break
            except (ConnectionError, http.client.HTTPException):
                self._upstream.close()
                self._upstream = None
                if attempt:
                    p._log(self.command, self.path, -1)
                    return self._hang_up()
        self._reply(resp, fault, body)

    def _reply(self, resp: http.client.HTTPResponse, fault, body: bytes = b"") -> None:
        """The store's reply to the client (its ETags rewritten when asked), held first for a
        HoldReply."""
        p = self.proxy
        data = resp.read()
        if p._etags_rewritten:
            data = _ETAG_XML.sub(lambda m: b"<ETag>&quot;" + p._rewritten(m.group(1).decode()).encode()
                                 + b"&quot;</ETag>", data)
        p._log(self.command, self.path, resp.status)  # the store has done it, whether or not the client hears
        restated = p._restater.headers(self.command, self.path, self.headers, body, resp) \
            if p._restater is not None else None
        if isinstance(fault, HoldReply):
            p._holding()
            p._stopping.wait(fault.seconds)
        try:
            self.send_response(resp.status, resp.reason)
            for k, v in restated if restated is not None else resp.getheaders():
                if k.lower() not in _HOP and k.lower() != "content-length":
                    rewrite = p._etags_rewritten and k.lower() == "etag"
                    self.send_header(k, f'"{p._rewritten(v.strip(chr(34)))}"' if rewrite else v)
            length = resp.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client was killed meanwhile
            self.close_connection = True

    def _refuse(self, status: int, code: str) -> None:
        payload = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
                   f"<Message>injected fault</Message><RequestId>{secrets.token_hex(8)}</RequestId></Error>").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        self.proxy._log(self.command, self.path, status)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

